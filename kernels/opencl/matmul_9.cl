// matmul_9: warp tiling with large per-work-item tiles and a pre-transposed A;
// C = A * B (row-major; A is MxK, B is KxN, C is MxN).
// Over matmul_8 (two-stage local memory, one barrier per tile, double-buffered register
// fragments, contiguous 8x8 results per work-item):
//  - Warp tiling, as NVIDIA serves local memory per 32-wide warp (work-items 32*w .. 32*w+31
//    of the work-group form warp w): each warp owns a WM x WN sub-tile of the BM x BN tile;
//    its 32 lanes form a (WM/TM) x (WN/TN) grid, and each lane's TM x TN results are
//    (TM/4) x (TN/4) blocks of 4x4 spaced WM/(TM/4) rows and WN/(TN/4) columns apart. At every
//    step k the lanes that differ along N read consecutive float4s of the B row and those along
//    M consecutive float4s of the A^T row (the others get a broadcast), so every fragment read
//    is one conflict-free 128-bit local load.
//  - Large per-work-item tiles like cuBLAS' SIMT kernels: TM and TN go up to 16, e.g. a
//    128x128 tile of 4 warps of 64x64 where each work-item holds 16x8 = 128 accumulators. A
//    step costs (TM+TN)/4 = 6 float4 local loads for 128 FMAs (matmul_8: 4 for 64), and with
//    BK = 16 one barrier serves 2048 FMAs per work-item.
//  - A pre-pass (transpose_a, below, launched first and timed with the kernel) writes
//    AT = A^T, K rows of LDT = round_up(M, 4) floats (pad columns are zero), into a scratch
//    buffer. Both tiles are then BK rows of contiguous floats whose starts are 16-byte aligned
//    (LDT % 4 == 0), copied as float4s straight into k-major local memory: no transposing
//    scalar stores and no padding. The pre-pass moves 2*M*K floats (about 1% at 4096).
//  - OpenCL has no cp.async (matmul_9.cu copies global -> shared with it, in a STAGES-deep
//    ring): here the next tile is staged in registers (float4 global loads issued at the start
//    of a tile, stored to the other local stage just before the barrier), matmul_8's double
//    buffer; STAGES is accepted but ignored (always 2 stages). Tiles, local layout, loader
//    mapping, fragment scheme and barrier placement are those of the CUDA source.
//  - C is written as float4 rows of each 4x4 block.
//
// Loop (one barrier per tile). Prologue: tile 0 -> stage 0, barrier, k = 0 fragments.
// Iteration t (stage cur = t % 2):
//  1. issue the global loads of tile t+1 into registers;
//  2. steps k = 0 .. BK-2: read the fragments of step k+1, FMA step k;
//  3. step BK-1: store tile t+1 into stage cur^1, barrier B(t), read the k = 0 fragments of
//     tile t+1 into set 0 (BK is even, so step BK-1 uses set 1), then FMA step BK-1.
//  Race-free: stage cur^1 was last read for tile t-1 before B(t-1) (its last fragment at step
//  BK-2 of iteration t-1), and every work-item has passed B(t-1) before anyone stores in
//  iteration t; tile t+1 is read only after B(t), which follows all its stores.
//
// Edges (any M, N, K >= 1): the pre-pass guards its reads and writes (pad columns M .. LDT-1
// get zeros); the grid is rounded up to whole tiles. A^T chunks are float4 always (LDT % 4 == 0:
// a chunk is all inside or all outside); a chunk outside AT (row k >= K or column >= LDT) reads
// as zeros. B chunks are one float4 load when N % 4 == 0, else four guarded scalar loads,
// zero outside B. C is stored as float4s when N % 4 == 0, else as four guarded scalars; rows
// or columns outside C are skipped. These choices are uniform across the kernel, and every
// work-item reaches every barrier (the trip counts depend on K only).

#ifndef BM
#define BM 128  // rows of C per work-group
#endif
#ifndef BN
#define BN 128  // columns of C per work-group
#endif
#ifndef BK
#define BK 16   // depth of the A^T and B tiles staged in local memory per step
#endif
#ifndef WM
#define WM 64   // rows of C per warp
#endif
#ifndef WN
#define WN 64   // columns of C per warp
#endif
#ifndef TM
#define TM 16   // rows of C per work-item: TM/4 blocks of 4 rows
#endif
#ifndef TN
#define TN 8    // columns of C per work-item: TN/4 blocks of 4 columns
#endif
#ifndef STAGES
#define STAGES 3  // local-memory tiles in the CUDA cp.async ring; ignored here (always 2)
#endif

#define WARP 32                                 // work-items per warp (NVIDIA)
#define WARPS_N (BN / WN)                       // warps along N
#define THREADS ((BM / WM) * WARPS_N * WARP)    // work-items per work-group
#define LANES_N (WN / TN)                       // lanes of a warp along N
#define SUB_M (TM / 4)                          // 4x4 blocks per work-item along M
#define SUB_N (TN / 4)                          // 4x4 blocks per work-item along N
#define SUB_M_STRIDE (WM / SUB_M)               // rows between a work-item's 4x4 blocks
#define SUB_N_STRIDE (WN / SUB_N)               // columns between a work-item's 4x4 blocks
#define A_F4 (BK * BM / 4)                      // float4 chunks in an A^T tile
#define B_F4 (BK * BN / 4)                      // float4 chunks in a B tile
#define A_LOADS ((A_F4 + THREADS - 1) / THREADS)  // chunks of the A^T tile per work-item
#define B_LOADS ((B_F4 + THREADS - 1) / THREADS)  // chunks of the B tile per work-item

// Pre-pass: AT (K rows of LDT = round_up(M, 4) floats) = A^T, pad columns M .. LDT-1 zero.
// A 32x32 tile of A goes through local memory so that the reads (along K) and the writes
// (along M) are both coalesced; the +1 padding puts a tile column in distinct banks. A
// work-group is 32 x 8 work-items, each moving 4 elements. Grid: ceil_div(K, 32) x ceil_div(M, 32).
__kernel __attribute__((reqd_work_group_size(32, 8, 1)))
void transpose_a(const int M, const int K, const __global float* A, __global float* AT) {
    __local float tile[32][33];
    const int ldt = (M + 3) & ~3;
    const int tx = get_local_id(0);
    const int ty = get_local_id(1);
    const int k0 = get_group_id(0) * 32;
    const int m0 = get_group_id(1) * 32;
#pragma unroll
    for (int r = 0; r < 32; r += 8) {
        const int m = m0 + ty + r;
        const int k = k0 + tx;
        tile[ty + r][tx] = (m < M && k < K) ? A[m * K + k] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int r = 0; r < 32; r += 8) {
        const int k = k0 + ty + r;
        const int m = m0 + tx;
        if (k < K && m < ldt) AT[(size_t)k * ldt + m] = tile[tx][ty + r];
    }
}

// Where float4 chunk f (= tid + i*THREADS) of a tile goes: row-major, W/4 chunks per row of W.
#define TILE_ROW(f, W) ((f) / ((W) / 4))
#define TILE_COL(f, W) (((f) % ((W) / 4)) * 4)

// Stores four consecutive elements (row, col..col+3) of C, skipping those outside it.
inline void store4_guarded(__global float* X, const int row, const int col, const int rows,
                           const int cols, const int vec_ok, const float4 v) {
    if (row < rows) {
        __global float* p = X + row * cols + col;
        if (vec_ok) {
            if (col < cols) *((__global float4*)p) = v;
        } else {
            if (col < cols) p[0] = v.x;
            if (col + 1 < cols) p[1] = v.y;
            if (col + 2 < cols) p[2] = v.z;
            if (col + 3 < cols) p[3] = v.w;
        }
    }
}

// Global loads of the tile at depth k0 into a_st[A_LOADS], b_st[B_LOADS] (zeros outside).
#define LOAD_TILE(k0)                                                                             \
    do {                                                                                          \
        const __global float* at_tile_ = AT + (size_t)(k0) * ldt;                                 \
        _Pragma("unroll") for (int i_ = 0; i_ < A_LOADS; i_++) {                                  \
            const int f_ = tid + i_ * THREADS;                                                    \
            a_st[i_] = (float4)(0.0f);                                                            \
            if (A_F4 % THREADS == 0 || f_ < A_F4) {                                               \
                const int r_ = TILE_ROW(f_, BM);                                                  \
                const int c_ = TILE_COL(f_, BM);                                                  \
                if ((k0) + r_ < K && block_row + c_ < ldt)                                        \
                    a_st[i_] = *((const __global float4*)(at_tile_ + (size_t)r_ * ldt + block_row + c_)); \
            }                                                                                     \
        }                                                                                         \
        _Pragma("unroll") for (int i_ = 0; i_ < B_LOADS; i_++) {                                  \
            const int f_ = tid + i_ * THREADS;                                                    \
            b_st[i_] = (float4)(0.0f);                                                            \
            if (B_F4 % THREADS == 0 || f_ < B_F4) {                                               \
                const int k_ = (k0) + TILE_ROW(f_, BN);                                           \
                const int n_ = block_col + TILE_COL(f_, BN);                                      \
                if (k_ < K) {                                                                     \
                    const __global float* p_ = B + k_ * N + n_;                                   \
                    if (b_vec) {                                                                  \
                        if (n_ < N) b_st[i_] = *((const __global float4*)p_);                     \
                    } else {                                                                      \
                        if (n_ < N) b_st[i_].x = p_[0];                                           \
                        if (n_ + 1 < N) b_st[i_].y = p_[1];                                       \
                        if (n_ + 2 < N) b_st[i_].z = p_[2];                                       \
                        if (n_ + 3 < N) b_st[i_].w = p_[3];                                       \
                    }                                                                             \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
    } while (0)

// Stores the staged tile into local stage s (float4 stores, the CUDA cp.async destinations).
#define STORE_TILE(s)                                                                             \
    do {                                                                                          \
        _Pragma("unroll") for (int i_ = 0; i_ < A_LOADS; i_++) {                                  \
            const int f_ = tid + i_ * THREADS;                                                    \
            if (A_F4 % THREADS == 0 || f_ < A_F4)                                                 \
                *((__local float4*)&As[s][TILE_ROW(f_, BM)][TILE_COL(f_, BM)]) = a_st[i_];        \
        }                                                                                         \
        _Pragma("unroll") for (int i_ = 0; i_ < B_LOADS; i_++) {                                  \
            const int f_ = tid + i_ * THREADS;                                                    \
            if (B_F4 % THREADS == 0 || f_ < B_F4)                                                 \
                *((__local float4*)&Bs[s][TILE_ROW(f_, BN)][TILE_COL(f_, BN)]) = b_st[i_];        \
        }                                                                                         \
    } while (0)

// Reads the fragments of step k from local stage s into a_f[TM], b_f[TN]: float4 loads.
#define READ_FRAGMENTS(a_f, b_f, s, k)                                                            \
    do {                                                                                          \
        _Pragma("unroll") for (int i_ = 0; i_ < SUB_M; i_++) {                                    \
            const float4 v_ = *((const __local float4*)&As[s][k][m_base + i_ * SUB_M_STRIDE]);    \
            a_f[4 * i_] = v_.x; a_f[4 * i_ + 1] = v_.y; a_f[4 * i_ + 2] = v_.z; a_f[4 * i_ + 3] = v_.w; \
        }                                                                                         \
        _Pragma("unroll") for (int j_ = 0; j_ < SUB_N; j_++) {                                    \
            const float4 v_ = *((const __local float4*)&Bs[s][k][n_base + j_ * SUB_N_STRIDE]);    \
            b_f[4 * j_] = v_.x; b_f[4 * j_ + 1] = v_.y; b_f[4 * j_ + 2] = v_.z; b_f[4 * j_ + 3] = v_.w; \
        }                                                                                         \
    } while (0)

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void matmul_9(const int M, const int N, const int K,
              const __global float* AT, const __global float* B, __global float* C) {
    __local float As[2][BK][BM] __attribute__((aligned(16)));  // A^T tiles: [k][m]
    __local float Bs[2][BK][BN] __attribute__((aligned(16)));  // B tiles: [k][n]

    const int tid = get_local_id(0);
    const int warp = tid / WARP;
    const int lane = tid % WARP;
    // First row / column of this work-item's first 4x4 block, within the work-group tile.
    const int m_base = (warp / WARPS_N) * WM + (lane / LANES_N) * 4;
    const int n_base = (warp % WARPS_N) * WN + (lane % LANES_N) * 4;
    const int block_row = get_group_id(1) * BM;
    const int block_col = get_group_id(0) * BN;
    const int ldt = (M + 3) & ~3;  // row length of AT
    const int b_vec = (N % 4) == 0;
    const int num_tiles = (K + BK - 1) / BK;

    float4 a_st[A_LOADS];  // the next tile, in flight from global memory
    float4 b_st[B_LOADS];
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;
    float a_frag[2][TM];  // two sets: step k+1 is read while step k is computed
    float b_frag[2][TN];

    // Prologue: tile 0 into stage 0, then its k=0 fragments into set 0.
    LOAD_TILE(0);
    STORE_TILE(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    READ_FRAGMENTS(a_frag[0], b_frag[0], 0, 0);

    for (int t = 0; t < num_tiles; t++) {
        const int cur = t & 1;
        const int has_next = t + 1 < num_tiles;  // uniform across the work-group
        // 1. Tile t+1 into registers; the loads complete while steps 0 .. BK-2 compute.
        if (has_next) LOAD_TILE((t + 1) * BK);

        // 2. Steps k = 0 .. BK-2: read the fragments of step k+1, FMA step k.
#pragma unroll
        for (int k = 0; k < BK - 1; k++) {
            READ_FRAGMENTS(a_frag[(k + 1) % 2], b_frag[(k + 1) % 2], cur, k + 1);
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++)
                    acc[i][j] = fma(a_frag[k % 2][i], b_frag[k % 2][j], acc[i][j]);
        }
        // 3. Step BK-1: tile t+1 goes to the other stage, barrier, its k=0 fragments into set 0.
        if (has_next) {
            STORE_TILE(cur ^ 1);
            barrier(CLK_LOCAL_MEM_FENCE);  // B(t): the one barrier per tile
            READ_FRAGMENTS(a_frag[0], b_frag[0], cur ^ 1, 0);
        }
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TN; j++)
                acc[i][j] = fma(a_frag[(BK - 1) % 2][i], b_frag[(BK - 1) % 2][j], acc[i][j]);
    }

    // Epilogue: each row of each 4x4 block as one float4 store.
#pragma unroll
    for (int i = 0; i < SUB_M; i++)
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int j = 0; j < SUB_N; j++) {
                const int row = block_row + m_base + i * SUB_M_STRIDE + r;
                const int col = block_col + n_base + j * SUB_N_STRIDE;
                store4_guarded(C, row, col, M, N, b_vec,
                               (float4)(acc[4 * i + r][4 * j], acc[4 * i + r][4 * j + 1],
                                        acc[4 * i + r][4 * j + 2], acc[4 * i + r][4 * j + 3]));
            }
}
