// matmul_9: warp tiling with large per-thread tiles, a pre-transposed A and (CUDA) a cp.async
// pipeline; C = A * B (row-major; A is MxK, B is KxN, C is MxN).
// Over matmul_8 (two-stage shared memory, one barrier per tile, double-buffered register
// fragments, contiguous 8x8 results per thread):
//  - Warp tiling, as NVIDIA serves shared memory per 32-wide warp: each warp owns a WM x WN
//    sub-tile of the BM x BN block tile; its 32 lanes form a (WM/TM) x (WN/TN) grid, and each
//    lane's TM x TN results are (TM/4) x (TN/4) blocks of 4x4 spaced WM/(TM/4) rows and
//    WN/(TN/4) columns apart. At every step k the lanes that differ along N read consecutive
//    float4s of the B row and those along M consecutive float4s of the A^T row (the others get
//    a broadcast), so every fragment read is one conflict-free 128-bit shared load (LDS.128).
//  - Large per-thread tiles like cuBLAS' SIMT kernels: TM and TN go up to 16, e.g. a 128x128
//    block of 4 warps of 64x64 where each thread holds 16x8 = 128 accumulators (about 200
//    registers, two 128-thread blocks per SM). A step costs (TM+TN)/4 = 6 LDS.128 for 128 FFMAs
//    (matmul_8: 4 for 64), and with BK = 16 one barrier serves 2048 FFMAs per thread.
//  - A pre-pass (transpose_a, below, launched first and timed with the kernel) writes
//    AT = A^T, K rows of LDT = round_up(M, 4) floats (pad columns are zero), into a scratch
//    buffer. Both tiles are then BK rows of contiguous floats whose starts are 16-byte aligned
//    (LDT % 4 == 0), copied as float4s straight into k-major shared memory: no transposing
//    scalar stores and no padding. The pre-pass moves 2*M*K floats (about 1% at 4096).
//  - CUDA only: global -> shared copies are cp.async (LDGSTS, 16 bytes, .cg: L2 only) in a
//    STAGES-deep ring of shared tiles (cp.async.commit_group per tile, wait_group STAGES-2):
//    the data never passes through registers, so prefetching costs no registers and tile t+2
//    is in flight while tile t is computed (STAGES = 3). OpenCL has no cp.async: matmul_9.cl
//    keeps matmul_8's register-staged double buffer (STAGES is ignored there) with the same
//    tiles, shared layout, loader mapping and fragment scheme.
//  - C is written as float4 rows of each 4x4 block.
//
// Pipeline (one barrier per tile). Prologue: tiles 0 .. STAGES-2 are issued into stages
// 0 .. STAGES-2 (one commit group each, empty past the last tile), wait_group(STAGES-2) and a
// barrier make tile 0 visible, and the k = 0 fragments are read. Iteration t (stage t % STAGES):
//  1. issue tile t+STAGES-1 into stage (t-1) % STAGES and commit (an empty group past the end,
//     so group g is always tile g);
//  2. steps k = 0 .. BK-2: read the fragments of step k+1, FMA step k;
//  3. step BK-1: wait_group(STAGES-2) (this thread's copies of tile t+1 have landed: STAGES+t
//     groups were committed), barrier B(t) (everyone's have), read the k = 0 fragments of tile
//     t+1 into set 0 (BK is even, so step BK-1 uses set 1), then FMA step BK-1.
//  Race-free: stage (t-1) % STAGES, written from step 1 of iteration t on, was last read for
//  tile t-1 before B(t-1) (its last fragment at step BK-2 of iteration t-1), and every thread
//  has passed B(t-1) before anyone reaches iteration t; tile t+1 is read only after B(t),
//  which every thread reaches after its wait_group. With STAGES = 2 this is the classic double
//  buffer: tile t+1 is copied while steps 0 .. BK-2 of tile t compute.
//
// Edges (any M, N, K >= 1): the pre-pass guards its reads and writes (pad columns M .. LDT-1
// get zeros); the grid is rounded up to whole tiles. A^T chunks are float4 always (LDT % 4 == 0:
// a chunk is all inside or all outside); a chunk outside AT (row k >= K or column >= LDT) is
// zero-filled by cp.async's src-size operand (0 bytes read, 16 zeros written). B chunks are one
// 16-byte cp.async when N % 4 == 0, else four 4-byte cp.async (.ca), each zero-filled on its
// own when outside B. C is stored as float4s when N % 4 == 0, else as four guarded scalars;
// rows or columns outside C are skipped. These choices are uniform across the kernel, and every
// thread reaches every barrier (the trip counts depend on K only).
// __launch_bounds__(THREADS, MIN_BLOCKS) asks for MIN_BLOCKS blocks per SM, derived below so
// that the register cap it implies (65536 / (THREADS * MIN_BLOCKS)) never forces spills: two
// 256-thread 8x8 blocks (128 registers), two 128-thread 16x8 blocks (255), one 256-thread
// 16x8 block. With launch bounds NVRTC ignores --maxrregcount (the YAML's max_registers, which
// only the OpenCL build uses).

#ifndef BM
#define BM 128  // rows of C per block
#endif
#ifndef BN
#define BN 128  // columns of C per block
#endif
#ifndef BK
#define BK 16   // depth of the A^T and B tiles staged in shared memory per step
#endif
#ifndef WM
#define WM 64   // rows of C per warp
#endif
#ifndef WN
#define WN 64   // columns of C per warp
#endif
#ifndef TM
#define TM 16   // rows of C per thread: TM/4 blocks of 4 rows
#endif
#ifndef TN
#define TN 8    // columns of C per thread: TN/4 blocks of 4 columns
#endif
#ifndef STAGES
#define STAGES 3  // shared-memory tiles in the cp.async ring (CUDA; OpenCL always uses 2)
#endif

#define WARP 32                                 // threads per warp
#define WARPS_N (BN / WN)                       // warps along N
#define THREADS ((BM / WM) * WARPS_N * WARP)    // threads per block
#define LANES_N (WN / TN)                       // lanes of a warp along N
#define SUB_M (TM / 4)                          // 4x4 blocks per thread along M
#define SUB_N (TN / 4)                          // 4x4 blocks per thread along N
#define SUB_M_STRIDE (WM / SUB_M)               // rows between a thread's 4x4 blocks
#define SUB_N_STRIDE (WN / SUB_N)               // columns between a thread's 4x4 blocks
#define A_F4 (BK * BM / 4)                      // float4 chunks in an A^T tile
#define B_F4 (BK * BN / 4)                      // float4 chunks in a B tile
#define A_LOADS ((A_F4 + THREADS - 1) / THREADS)  // chunks of the A^T tile per thread
#define B_LOADS ((B_F4 + THREADS - 1) / THREADS)  // chunks of the B tile per thread
// Registers a thread needs, roughly: accumulators, two fragment sets, addresses and indices.
#define REG_ESTIMATE (TM * TN + 2 * (TM + TN) + 32)
#define BLOCKS_FIT (65536 / (THREADS * REG_ESTIMATE))
#define MIN_BLOCKS (BLOCKS_FIT < 1 ? 1 : (BLOCKS_FIT > 2 ? 2 : BLOCKS_FIT))

// Pre-pass: AT (K rows of LDT = round_up(M, 4) floats) = A^T, pad columns M .. LDT-1 zero.
// A 32x32 tile of A goes through shared memory so that the reads (along K) and the writes
// (along M) are both coalesced; the +1 padding puts a tile column in distinct banks. A block
// is 32 x 8 threads, each moving 4 elements. Grid: ceil_div(K, 32) x ceil_div(M, 32).
extern "C" __global__ void __launch_bounds__(256)
transpose_a(const int M, const int K, const float* __restrict__ A, float* __restrict__ AT) {
    __shared__ float tile[32][33];
    const int ldt = (M + 3) & ~3;
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int k0 = blockIdx.x * 32;
    const int m0 = blockIdx.y * 32;
#pragma unroll
    for (int r = 0; r < 32; r += 8) {
        const int m = m0 + ty + r;
        const int k = k0 + tx;
        tile[ty + r][tx] = (m < M && k < K) ? A[m * K + k] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 32; r += 8) {
        const int k = k0 + ty + r;
        const int m = m0 + tx;
        if (k < K && m < ldt) AT[(size_t)k * ldt + m] = tile[tx][ty + r];
    }
}

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

// Where float4 chunk f (= tid + i*THREADS) of a tile goes: row-major, W/4 chunks per row of W.
#define TILE_ROW(f, W) ((f) / ((W) / 4))
#define TILE_COL(f, W) (((f) % ((W) / 4)) * 4)

// Issues the copies of the tile at depth k0 into one stage (As_s: BK x BM, Bs_s: BK x BN).
__device__ __forceinline__ void issue_tile(float* As_s, float* Bs_s, const float* __restrict__ AT,
                                           const float* __restrict__ B, const int ldt,
                                           const int N, const int K, const int k0,
                                           const int block_row, const int block_col,
                                           const int tid, const int b_vec) {
    const float* at_tile = AT + (size_t)k0 * ldt;
#pragma unroll
    for (int i = 0; i < A_LOADS; i++) {
        const int f = tid + i * THREADS;
        if (A_F4 % THREADS == 0 || f < A_F4) {
            const int r = TILE_ROW(f, BM);
            const int c = TILE_COL(f, BM);
            const int inside = k0 + r < K && block_row + c < ldt;
            const float* src = inside ? at_tile + (size_t)r * ldt + block_row + c : AT;
            cp_async_16(shared_address(As_s + r * BM + c), src, inside ? 16 : 0);
        }
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; i++) {
        const int f = tid + i * THREADS;
        if (B_F4 % THREADS == 0 || f < B_F4) {
            const int r = TILE_ROW(f, BN);
            const int c = TILE_COL(f, BN);
            const int k = k0 + r;
            const int n = block_col + c;
            const unsigned dst = shared_address(Bs_s + r * BN + c);
            if (b_vec) {
                const int inside = k < K && n < N;
                cp_async_16(dst, inside ? B + k * N + n : B, inside ? 16 : 0);
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int inside = k < K && n + e < N;
                    cp_async_4(dst + 4 * e, inside ? B + k * N + n + e : B, inside ? 4 : 0);
                }
            }
        }
    }
}

// Stores four consecutive elements (row, col..col+3) of C, skipping those outside it.
__device__ __forceinline__ void store4_guarded(float* __restrict__ X, const int row, const int col,
                                               const int rows, const int cols, const int vec_ok,
                                               const float4 v) {
    if (row < rows) {
        float* p = X + row * cols + col;
        if (vec_ok) {
            if (col < cols) *reinterpret_cast<float4*>(p) = v;
        } else {
            if (col < cols) p[0] = v.x;
            if (col + 1 < cols) p[1] = v.y;
            if (col + 2 < cols) p[2] = v.z;
            if (col + 3 < cols) p[3] = v.w;
        }
    }
}

// Reads the fragments of step k from one stage into a_f[TM], b_f[TN]: LDS.128 each.
#define READ_FRAGMENTS(a_f, b_f, As_s, Bs_s, k)                                                  \
    do {                                                                                          \
        _Pragma("unroll") for (int i_ = 0; i_ < SUB_M; i_++) {                                    \
            const float4 v_ = *reinterpret_cast<const float4*>(                                   \
                (As_s) + (k) * BM + m_base + i_ * SUB_M_STRIDE);                                  \
            a_f[4 * i_] = v_.x; a_f[4 * i_ + 1] = v_.y; a_f[4 * i_ + 2] = v_.z; a_f[4 * i_ + 3] = v_.w; \
        }                                                                                         \
        _Pragma("unroll") for (int j_ = 0; j_ < SUB_N; j_++) {                                    \
            const float4 v_ = *reinterpret_cast<const float4*>(                                   \
                (Bs_s) + (k) * BN + n_base + j_ * SUB_N_STRIDE);                                  \
            b_f[4 * j_] = v_.x; b_f[4 * j_ + 1] = v_.y; b_f[4 * j_ + 2] = v_.z; b_f[4 * j_ + 3] = v_.w; \
        }                                                                                         \
    } while (0)

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_9(const int M, const int N, const int K, const float* __restrict__ AT,
         const float* __restrict__ B, float* __restrict__ C) {
    __shared__ __align__(16) float As[STAGES][BK][BM];  // A^T tiles: [k][m]
    __shared__ __align__(16) float Bs[STAGES][BK][BN];  // B tiles: [k][n]

    const int tid = threadIdx.x;
    const int warp = tid / WARP;
    const int lane = tid % WARP;
    // First row / column of this thread's first 4x4 block, within the block tile.
    const int m_base = (warp / WARPS_N) * WM + (lane / LANES_N) * 4;
    const int n_base = (warp % WARPS_N) * WN + (lane % LANES_N) * 4;
    const int block_row = blockIdx.y * BM;
    const int block_col = blockIdx.x * BN;
    const int ldt = (M + 3) & ~3;  // row length of AT
    const int b_vec = (N % 4) == 0;
    const int num_tiles = (K + BK - 1) / BK;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;
    float a_frag[2][TM];  // two sets: step k+1 is read while step k is computed
    float b_frag[2][TN];

    // Prologue: tiles 0 .. STAGES-2 in flight (group g = tile g), tile 0 visible, its k=0 fragments.
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < num_tiles)
            issue_tile(&As[s][0][0], &Bs[s][0][0], AT, B, ldt, N, K, s * BK, block_row, block_col,
                       tid, b_vec);
        cp_async_commit();
    }
    cp_async_wait_stages();
    __syncthreads();
    READ_FRAGMENTS(a_frag[0], b_frag[0], &As[0][0][0], &Bs[0][0][0], 0);

    int cur = 0;               // stage of tile t
    int fill = STAGES - 1;     // stage of tile t + STAGES - 1 (= stage of tile t-1)
    for (int t = 0; t < num_tiles; t++) {
        // 1. Tile t+STAGES-1 into the stage tile t-1 used (everyone passed B(t-1) since reading it).
        if (t + STAGES - 1 < num_tiles)
            issue_tile(&As[fill][0][0], &Bs[fill][0][0], AT, B, ldt, N, K, (t + STAGES - 1) * BK,
                       block_row, block_col, tid, b_vec);
        cp_async_commit();
        const int next = cur + 1 == STAGES ? 0 : cur + 1;  // stage of tile t+1

        // 2. Steps k = 0 .. BK-2: read the fragments of step k+1, FMA step k.
#pragma unroll
        for (int k = 0; k < BK - 1; k++) {
            READ_FRAGMENTS(a_frag[(k + 1) % 2], b_frag[(k + 1) % 2], &As[cur][0][0],
                           &Bs[cur][0][0], k + 1);
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++)
                    acc[i][j] = fmaf(a_frag[k % 2][i], b_frag[k % 2][j], acc[i][j]);
        }
        // 3. Step BK-1: wait for tile t+1, barrier, its k=0 fragments into set 0.
        if (t + 1 < num_tiles) {  // uniform across the block
            cp_async_wait_stages();  // this thread's copies of tile t+1 have landed
            __syncthreads();         // B(t): everyone's have; the one barrier per tile
            READ_FRAGMENTS(a_frag[0], b_frag[0], &As[next][0][0], &Bs[next][0][0], 0);
        }
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TN; j++)
                acc[i][j] = fmaf(a_frag[(BK - 1) % 2][i], b_frag[(BK - 1) % 2][j], acc[i][j]);
        fill = cur;
        cur = next;
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
                               make_float4(acc[4 * i + r][4 * j], acc[4 * i + r][4 * j + 1],
                                           acc[4 * i + r][4 * j + 2], acc[4 * i + r][4 * j + 3]));
            }
}
