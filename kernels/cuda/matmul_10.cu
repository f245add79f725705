// matmul_10: SGEMM on the tensor cores with TF32 inputs and FP32 accumulation; C = A * B
// (row-major; A is MxK, B is KxN, C is MxN). REDUCED PRECISION: every element of A and B is
// rounded to TF32 (10 stored mantissa bits, as cuBLAS in TF32 mode) before it is multiplied, so
// the result is about 2^-11 relative off where an FP32 SGEMM is 2^-24 off; the runner checks it
// with this step's own tolerance, records it as TF32 and compares it with cuBLAS in TF32 mode as
// well as with cuBLAS SGEMM. matmul_11 adds the error compensation that makes it FP32-accurate.
//
// Over the SIMT ladder (matmul_9: 128 FFMAs per 6 shared loads per thread and step), one
// mma.sync does 16x8x8 multiply-adds for a warp from 6 registers per lane, on units that the
// FFMA path never uses: H100's TF32 tensor throughput is several times its FP32 FFMA peak.
//
// Tensor cores: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (sm_80 and later), one warp
// computing a 16x8 tile of C from a 16x8 tile of A and an 8x8 tile of B. Fragment layout
// (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32), with g = lane / 4, t = lane % 4:
//   A (row-major 16x8): a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4]
//   B (8x8, "col"):     b0 = B[t][g], b1 = B[t+4][g]
//   C (16x8):           c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
//
// Tiling: a block of (BM/WM) x (BN/WN) warps computes a BM x BN tile of C; each warp a WM x WN
// tile as (WM/16) x (WN/8) mma tiles, that is (WM/16)*(WN/8)*4 accumulators per thread. A and B
// tiles (BK deep) go global -> shared with cp.async (LDGSTS, no registers) in a STAGES-deep
// ring, one barrier per tile; both are stored as in global memory (A: [m][k], B: [k][n]), so
// no pre-pass is needed, with padded rows that make every fragment read conflict-free:
//   A rows of BK+4 floats: lanes (g, t) read bank (g*(BK+4) + t) % 32, 32 distinct banks for
//     BK = 8, 16, 32;
//   B rows of BN+8 floats: lanes read bank (t*(BN+8) + g) % 32 = (8t + g) % 32, all distinct.
// Grouped block order (GROUP) as in matmul_9, for L2 reuse.
//
// Pipeline (one barrier per tile): the prologue issues tiles 0 .. STAGES-2, one commit group
// each. Iteration t: wait_group(STAGES-2) (this thread's copies of tile t landed), barrier (so
// have everyone's, and everyone finished computing tile t-1), issue tile t+STAGES-1 into the
// stage tile t-1 used, commit (an empty group past the end, so group g is always tile g),
// then compute tile t from its stage.
//
// Edges (any M, N, K >= 1): the grid is rounded up to whole tiles; a tile chunk outside A or B
// is zero-filled by cp.async's src-size operand (0 bytes read, zeros written; the pointer then
// is the matrix's start), so a ragged tile adds zeros to the sums. A chunks are 16-byte copies
// when K % 4 == 0 (a chunk is then all inside or all outside), else four 4-byte ones guarded one
// by one; B chunks likewise with N % 4. C is stored as float2 pairs when N % 2 == 0, else as
// guarded scalars; elements outside C are skipped. The choices are uniform and every thread
// reaches every barrier (the trip count depends on K only).
//
// Split-K (SPLIT_K > 1, chosen by size rules where the 128x128 tiles leave block slots empty,
// as in matmul_11): block z sums slice z of K, a whole number of tiles, into its own partial C
// in P; sum_slices then adds the slices into C in order (deterministic).

#ifndef BM
#define BM 128  // rows of C per block
#endif
#ifndef BN
#define BN 128  // columns of C per block
#endif
#ifndef BK
#define BK 16   // depth of the A and B tiles in shared memory (a multiple of the mma's k = 8)
#endif
#ifndef WM
#define WM 64   // rows of C per warp (a multiple of the mma's m = 16)
#endif
#ifndef WN
#define WN 64   // columns of C per warp (a multiple of the mma's n = 8)
#endif
#ifndef STAGES
#define STAGES 2  // shared-memory tiles in the cp.async ring
#endif
#ifndef GROUP
#define GROUP 8   // tile rows per group of the block order (1 = row by row), for L2 reuse
#endif
#ifndef SPLIT_K
#define SPLIT_K 1  // slices of K, one block of each per tile of C (grid z); > 1: C is their sum
#endif

#define WARP 32
#define WARPS_N (BN / WN)                        // warps along N
#define THREADS ((BM / WM) * WARPS_N * WARP)     // threads per block
#define MT (WM / 16)                             // mma tiles per warp along M
#define NT (WN / 8)                              // mma tiles per warp along N
#define A_LD (BK + 4)                            // padded row of an A tile, in floats
#define B_LD (BN + 8)                            // padded row of a B tile, in floats
#define A_CHUNKS (BM * BK / 4)                   // 16-byte chunks in an A tile
#define B_CHUNKS (BK * BN / 4)                   // 16-byte chunks in a B tile
#define A_LOADS ((A_CHUNKS + THREADS - 1) / THREADS)
#define B_LOADS ((B_CHUNKS + THREADS - 1) / THREADS)
// Registers a thread needs, roughly: accumulators, fragments, addresses.
#define REG_ESTIMATE (MT * NT * 4 + MT * 4 + NT * 2 + 40)
#define BLOCKS_FIT (65536 / (THREADS * REG_ESTIMATE))
#define MIN_BLOCKS (BLOCKS_FIT < 1 ? 1 : (BLOCKS_FIT > 2 ? 2 : BLOCKS_FIT))

__device__ __forceinline__ unsigned shared_address(const float* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// 16 bytes global -> shared, bypassing L1; src_bytes = 0 reads nothing and writes 16 zeros.
__device__ __forceinline__ void cp_async_16(const unsigned dst, const float* src, const int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// 4 bytes global -> shared (.ca: 4-byte copies cannot bypass L1); src_bytes = 0 writes a zero.
__device__ __forceinline__ void cp_async_4(const unsigned dst, const float* src, const int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most STAGES-2 of this thread's commit groups are still in flight.
__device__ __forceinline__ void cp_async_wait_stages() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2) : "memory");
}

// x rounded to the nearest TF32 value (ties away from zero), as the bits of an FP32 number.
__device__ __forceinline__ unsigned to_tf32(const float x) {
    unsigned bits;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(bits) : "f"(x));
    return bits;
}

// d += a * b on the tensor cores: a 16x8 A fragment, an 8x8 B fragment, a 16x8 FP32 tile.
__device__ __forceinline__ void mma_tf32(float* d, const unsigned* a, const unsigned* b) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Issues the copies of the A and B tiles at depth k0 into one stage of the ring.
__device__ __forceinline__ void load_tile(float* As, float* Bs, const float* __restrict__ A,
                                          const float* __restrict__ B, const int M, const int N,
                                          const int K, const int block_row, const int block_col,
                                          const int k0, const int a_vec, const int b_vec) {
#pragma unroll
    for (int i = 0; i < A_LOADS; i++) {
        const int chunk = threadIdx.x + i * THREADS;
        if (A_CHUNKS % THREADS == 0 || chunk < A_CHUNKS) {
            const int row = chunk / (BK / 4);
            const int col = (chunk % (BK / 4)) * 4;
            const int m = block_row + row;
            const int k = k0 + col;
            const unsigned dst = shared_address(As + row * A_LD + col);
            if (a_vec) {
                const bool inside = m < M && k < K;
                cp_async_16(dst, inside ? A + m * K + k : A, inside ? 16 : 0);
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const bool inside = m < M && k + e < K;
                    cp_async_4(dst + 4 * e, inside ? A + m * K + k + e : A, inside ? 4 : 0);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; i++) {
        const int chunk = threadIdx.x + i * THREADS;
        if (B_CHUNKS % THREADS == 0 || chunk < B_CHUNKS) {
            const int row = chunk / (BN / 4);
            const int col = (chunk % (BN / 4)) * 4;
            const int k = k0 + row;
            const int n = block_col + col;
            const unsigned dst = shared_address(Bs + row * B_LD + col);
            if (b_vec) {
                const bool inside = k < K && n < N;
                cp_async_16(dst, inside ? B + k * N + n : B, inside ? 16 : 0);
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const bool inside = k < K && n + e < N;
                    cp_async_4(dst + 4 * e, inside ? B + k * N + n + e : B, inside ? 4 : 0);
                }
            }
        }
    }
}

// Stores C[row][col], C[row][col+1], skipping what is outside C.
__device__ __forceinline__ void store_pair(float* __restrict__ C, const int row, const int col,
                                           const int M, const int N, const int pair_ok,
                                           const float x, const float y) {
    if (row >= M) return;
    float* p = C + row * N + col;
    if (pair_ok) {  // N even and col even: an aligned float2, both inside or both outside
        if (col < N) *reinterpret_cast<float2*>(p) = make_float2(x, y);
    } else {
        if (col < N) p[0] = x;
        if (col + 1 < N) p[1] = y;
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_10(const int M, const int N, const int K, const float* __restrict__ A,
          const float* __restrict__ B, float* __restrict__ C) {
    __shared__ __align__(16) float As[STAGES][BM * A_LD];  // A tiles: [m][k], padded rows
    __shared__ __align__(16) float Bs[STAGES][BK * B_LD];  // B tiles: [k][n], padded rows

    const int warp = threadIdx.x / WARP;
    const int lane = threadIdx.x % WARP;
    const int g = lane / 4;  // the fragment layout's groupID
    const int t = lane % 4;  // and threadID_in_group
    const int warp_row = (warp / WARPS_N) * WM;
    const int warp_col = (warp % WARPS_N) * WN;

#if GROUP == 1
    const int tile_m = blockIdx.y;
    const int tile_n = blockIdx.x;
#else
    int tile_m, tile_n;
    {
        const int pid = blockIdx.y * gridDim.x + blockIdx.x;
        const int in_group = GROUP * gridDim.x;          // blocks in a group of GROUP tile rows
        const int first_m = (pid / in_group) * GROUP;
        const int rows = min((int)gridDim.y - first_m, GROUP);  // the last group may be short
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
    // Slice blockIdx.z of K: whole tiles, so only the last slice meets K's edge (the guards
    // against K stay as they are); a slice past K (tiny K) computes zeros, and stores them.
    const int slice = (K + BK * SPLIT_K - 1) / (BK * SPLIT_K) * BK;
    const int k_begin = blockIdx.z * slice;
    const int k_length = min(K - k_begin, slice);
    const int num_tiles = k_length > 0 ? (k_length + BK - 1) / BK : 0;
#else
    const int k_begin = 0;
    const int num_tiles = (K + BK - 1) / BK;
#endif

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < num_tiles)
            load_tile(As[s], Bs[s], A, B, M, N, K, block_row, block_col, k_begin + s * BK, a_vec,
                      b_vec);
        cp_async_commit();
    }

    for (int tile = 0; tile < num_tiles; tile++) {
        cp_async_wait_stages();
        __syncthreads();
        const int next = tile + STAGES - 1;
        if (next < num_tiles)
            load_tile(As[next % STAGES], Bs[next % STAGES], A, B, M, N, K, block_row, block_col,
                      k_begin + next * BK, a_vec, b_vec);
        cp_async_commit();

        // This lane's first A element (row g, column t) and B element (row t, column g).
        const float* a_s = As[tile % STAGES] + (warp_row + g) * A_LD + t;
        const float* b_s = Bs[tile % STAGES] + t * B_LD + warp_col + g;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            unsigned a_frag[MT][4], b_frag[NT][2];
#pragma unroll
            for (int i = 0; i < MT; i++) {
                const float* p = a_s + i * 16 * A_LD + kk;
                a_frag[i][0] = to_tf32(p[0]);
                a_frag[i][1] = to_tf32(p[8 * A_LD]);
                a_frag[i][2] = to_tf32(p[4]);
                a_frag[i][3] = to_tf32(p[8 * A_LD + 4]);
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const float* p = b_s + kk * B_LD + j * 8;
                b_frag[j][0] = to_tf32(p[0]);
                b_frag[j][1] = to_tf32(p[4 * B_LD]);
            }
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT; j++) mma_tf32(acc[i][j], a_frag[i], b_frag[j]);
        }
    }

    const int pair_ok = (N % 2) == 0;
#if SPLIT_K > 1
    C += (size_t)blockIdx.z * M * N;  // this slice's partial C; sum_slices adds them up
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
// order, so the result does not depend on timing), one element per thread.
extern "C" __global__ void __launch_bounds__(256)
sum_slices(const int M, const int N, const float* __restrict__ P, float* __restrict__ C) {
    const size_t elements = (size_t)M * N;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= elements) return;
    float sum = P[i];
#pragma unroll
    for (int z = 1; z < SPLIT_K; z++) sum += P[z * elements + i];
    C[i] = sum;
}
