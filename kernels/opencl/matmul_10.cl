// matmul_10: SGEMM on the tensor cores with TF32 inputs and FP32 accumulation; C = A * B
// (row-major; A is MxK, B is KxN, C is MxN). REDUCED PRECISION: every element of A and B is
// rounded to TF32 (10 stored mantissa bits) before it is multiplied; the runner checks it with
// this step's own tolerance and compares it with cuBLAS in TF32 mode as well as SGEMM.
// NVIDIA GPUs only (compute capability 8.0 or later): the tensor-core instructions are inline
// PTX, which NVIDIA's OpenCL compiler passes through; the runner refuses other devices.
//
// The same algorithm as kernels/cuda/matmul_10.cu (read its header and matmul_11.cu's for the
// fragment layout and the conflict-free padded tiles), one mma.sync.m16n8k8 per 16x8x8 product.
// OpenCL has no cp.async: the next A and B tiles are loaded into registers (float4 chunks when
// K % 4 == 0 for A and N % 4 == 0 for B, else guarded elements) while the current tile is
// computed, then stored into the other of two local-memory stages, one barrier per tile:
//   prologue: tile 0 -> registers -> stage 0, barrier;
//   iteration t: load tile t+1 into registers; compute tile t from stage t % 2; store the
//   registers into stage (t+1) % 2; barrier.
// Race-free: stage (t+1) % 2 was last read while computing tile t-1, before the barrier that
// ended iteration t-1; tile t+1 is read only after the barrier that ends iteration t.
//
// Edges (any M, N, K >= 1): the grid is rounded up to whole tiles; chunks and elements outside
// A or B are zeros in the registers, so a ragged tile adds zeros; C is stored as float2 pairs
// when N % 2 == 0, else as guarded scalars, and elements outside C are skipped. Every work-item
// reaches every barrier (the trip count depends on K only). Split-K (SPLIT_K > 1): work-group
// z sums slice z of K, whole tiles, into its own partial C in P; sum_slices adds them in order.

#ifndef BM
#define BM 128  // rows of C per work-group
#endif
#ifndef BN
#define BN 128  // columns of C per work-group
#endif
#ifndef BK
#define BK 16   // depth of the A and B tiles in local memory (a multiple of the mma's k = 8)
#endif
#ifndef WM
#define WM 64   // rows of C per warp (a multiple of the mma's m = 16)
#endif
#ifndef WN
#define WN 64   // columns of C per warp (a multiple of the mma's n = 8)
#endif
#ifndef STAGES
#define STAGES 2  // CUDA's cp.async ring depth: OpenCL always uses 2 register-staged stages
#endif
#ifndef GROUP
#define GROUP 8   // tile rows per group of the work-group order (1 = row by row), for L2 reuse
#endif
#ifndef SPLIT_K
#define SPLIT_K 1  // slices of K, one work-group of each per tile of C (group z); > 1: C is their sum
#endif

#define WARP 32
#define WARPS_N (BN / WN)                        // warps along N
#define THREADS ((BM / WM) * WARPS_N * WARP)     // work-items per work-group
#define MT (WM / 16)                             // mma tiles per warp along M
#define NT (WN / 8)                              // mma tiles per warp along N
#define A_LD (BK + 4)                            // padded row of an A tile, in floats
#define B_LD (BN + 8)                            // padded row of a B tile, in floats
#define A_CHUNKS (BM * BK / 4)                   // float4 chunks in an A tile
#define B_CHUNKS (BK * BN / 4)                   // float4 chunks in a B tile
#define A_LOADS ((A_CHUNKS + THREADS - 1) / THREADS)
#define B_LOADS ((B_CHUNKS + THREADS - 1) / THREADS)

// x rounded to the nearest TF32 value (ties away from zero), as the bits of an FP32 number.
inline uint to_tf32(const float x) {
    uint bits;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(x));
    return bits;
}

// d += a * b on the tensor cores: a 16x8 A fragment, an 8x8 B fragment, a 16x8 FP32 tile.
inline void mma_tf32(float* d, const uint* a, const uint* b) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One float4 chunk of X (rows x cols, row-major) at (row, col..col+3); zeros outside X.
inline float4 load_chunk(const __global float* restrict X, const int row, const int col,
                         const int rows, const int cols, const int vec_ok) {
    if (row >= rows) return (float4)(0.0f);
    const __global float* p = X + row * cols + col;
    if (vec_ok) return col < cols ? vload4(0, p) : (float4)(0.0f);
    return (float4)(col < cols ? p[0] : 0.0f, col + 1 < cols ? p[1] : 0.0f,
                    col + 2 < cols ? p[2] : 0.0f, col + 3 < cols ? p[3] : 0.0f);
}

// Stores C[row][col], C[row][col+1], skipping what is outside C.
inline void store_pair(__global float* restrict C, const int row, const int col, const int M,
                       const int N, const int pair_ok, const float x, const float y) {
    if (row >= M) return;
    __global float* p = C + row * N + col;
    if (pair_ok) {  // N even and col even: an aligned float2, both inside or both outside
        if (col < N) vstore2((float2)(x, y), 0, p);
    } else {
        if (col < N) p[0] = x;
        if (col + 1 < N) p[1] = y;
    }
}

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void matmul_10(const int M, const int N, const int K, const __global float* restrict A,
               const __global float* restrict B, __global float* restrict C) {
    __local float As[2][BM * A_LD] __attribute__((aligned(16)));  // A tiles: [m][k], padded
    __local float Bs[2][BK * B_LD] __attribute__((aligned(16)));  // B tiles: [k][n], padded

    const int tid = get_local_id(0);
    const int warp = tid / WARP;
    const int lane = tid % WARP;
    const int g = lane / 4;  // the fragment layout's groupID
    const int t = lane % 4;  // and threadID_in_group
    const int warp_row = (warp / WARPS_N) * WM;
    const int warp_col = (warp % WARPS_N) * WN;

#if GROUP == 1
    const int tile_m = get_group_id(1);
    const int tile_n = get_group_id(0);
#else
    int tile_m, tile_n;
    {
        const int groups_n = get_num_groups(0);
        const int pid = get_group_id(1) * groups_n + get_group_id(0);
        const int in_group = GROUP * groups_n;           // work-groups in GROUP tile rows
        const int first_m = (pid / in_group) * GROUP;
        const int rows = min((int)get_num_groups(1) - first_m, GROUP);  // last group may be short
        const int r = pid - (pid / in_group) * in_group;
        tile_m = first_m + r % rows;
        tile_n = r / rows;
    }
#endif
    const int block_row = tile_m * BM;
    const int block_col = tile_n * BN;
    const int a_vec = (K % 4) == 0;
    const int b_vec = (N % 4) == 0;
#if SPLIT_K > 1
    // Slice get_group_id(2) of K: whole tiles, so only the last slice meets K's edge (the
    // guards against K stay as they are); a slice past K (tiny K) computes zeros, and stores them.
    const int slice = (K + BK * SPLIT_K - 1) / (BK * SPLIT_K) * BK;
    const int k_begin = get_group_id(2) * slice;
    const int k_length = min(K - k_begin, slice);
    const int num_tiles = k_length > 0 ? (k_length + BK - 1) / BK : 0;
#else
    const int k_begin = 0;
    const int num_tiles = (K + BK - 1) / BK;
#endif

    float4 a_next[A_LOADS], b_next[B_LOADS];
#define LOAD_TILE(k0)                                                                              \
    do {                                                                                          \
        _Pragma("unroll") for (int i_ = 0; i_ < A_LOADS; i_++) {                                  \
            const int c_ = tid + i_ * THREADS;                                                    \
            a_next[i_] = (A_CHUNKS % THREADS == 0 || c_ < A_CHUNKS)                               \
                ? load_chunk(A, block_row + c_ / (BK / 4), (k0) + (c_ % (BK / 4)) * 4, M, K, a_vec) \
                : (float4)(0.0f);                                                                 \
        }                                                                                         \
        _Pragma("unroll") for (int i_ = 0; i_ < B_LOADS; i_++) {                                  \
            const int c_ = tid + i_ * THREADS;                                                    \
            b_next[i_] = (B_CHUNKS % THREADS == 0 || c_ < B_CHUNKS)                               \
                ? load_chunk(B, (k0) + c_ / (BN / 4), block_col + (c_ % (BN / 4)) * 4, K, N, b_vec) \
                : (float4)(0.0f);                                                                 \
        }                                                                                         \
    } while (0)
#define STORE_TILE(stage)                                                                          \
    do {                                                                                          \
        _Pragma("unroll") for (int i_ = 0; i_ < A_LOADS; i_++) {                                  \
            const int c_ = tid + i_ * THREADS;                                                    \
            if (A_CHUNKS % THREADS == 0 || c_ < A_CHUNKS)                                         \
                *(__local float4*)(As[stage] + (c_ / (BK / 4)) * A_LD + (c_ % (BK / 4)) * 4) = a_next[i_]; \
        }                                                                                         \
        _Pragma("unroll") for (int i_ = 0; i_ < B_LOADS; i_++) {                                  \
            const int c_ = tid + i_ * THREADS;                                                    \
            if (B_CHUNKS % THREADS == 0 || c_ < B_CHUNKS)                                         \
                *(__local float4*)(Bs[stage] + (c_ / (BN / 4)) * B_LD + (c_ % (BN / 4)) * 4) = b_next[i_]; \
        }                                                                                         \
    } while (0)

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;

    LOAD_TILE(k_begin);
    STORE_TILE(0);
    barrier(CLK_LOCAL_MEM_FENCE);

    for (int tile = 0; tile < num_tiles; tile++) {
        const int stage = tile & 1;
        const int more = tile + 1 < num_tiles;
        if (more) LOAD_TILE(k_begin + (tile + 1) * BK);

        // This work-item's first A element (row g, column t) and B element (row t, column g).
        const __local float* a_s = As[stage] + (warp_row + g) * A_LD + t;
        const __local float* b_s = Bs[stage] + t * B_LD + warp_col + g;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            uint a_frag[MT][4], b_frag[NT][2];
#pragma unroll
            for (int i = 0; i < MT; i++) {
                const __local float* p = a_s + i * 16 * A_LD + kk;
                a_frag[i][0] = to_tf32(p[0]);
                a_frag[i][1] = to_tf32(p[8 * A_LD]);
                a_frag[i][2] = to_tf32(p[4]);
                a_frag[i][3] = to_tf32(p[8 * A_LD + 4]);
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const __local float* p = b_s + kk * B_LD + j * 8;
                b_frag[j][0] = to_tf32(p[0]);
                b_frag[j][1] = to_tf32(p[4 * B_LD]);
            }
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT; j++) mma_tf32(acc[i][j], a_frag[i], b_frag[j]);
        }

        if (more) STORE_TILE(stage ^ 1);
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    const int pair_ok = (N % 2) == 0;
#if SPLIT_K > 1
    C += (size_t)get_group_id(2) * M * N;  // this slice's partial C; sum_slices adds them up
#endif
#pragma unroll
    for (int i = 0; i < MT; i++) {
        const int row = block_row + warp_row + i * 16 + g;
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const int col = block_col + warp_col + j * 8 + 2 * t;
            store_pair(C, row, col, M, N, pair_ok, acc[i][j][0], acc[i][j][1]);
            store_pair(C, row + 8, col, M, N, pair_ok, acc[i][j][2], acc[i][j][3]);
        }
    }
}

// C = the sum of the SPLIT_K partial products P (SPLIT_K slices of M x N, slice by slice in
// order, so the result does not depend on timing), one element per work-item.
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void sum_slices(const int M, const int N, const __global float* restrict P,
                __global float* restrict C) {
    const size_t elements = (size_t)M * N;
    const size_t i = get_global_id(0);
    if (i >= elements) return;
    float sum = P[i];
#pragma unroll
    for (int z = 1; z < SPLIT_K; z++) sum += P[z * elements + i];
    C[i] = sum;
}
