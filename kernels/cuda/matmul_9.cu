// matmul_9: warp tiling, C = A * B (row-major; A is MxK, B is KxN, C is MxN).
// Over matmul_8 (same two-stage shared memory, one barrier per tile, double-buffered register
// fragments), the work is arranged around the 32-wide warp, which is how NVIDIA hardware serves
// shared memory (threads 32*w .. 32*w+31 of the block form warp w):
//  - Each warp owns a WM x WN sub-tile of the BM x BN block of C. Its 32 lanes form a
//    (WM/TM) x (WN/TN) grid, and each lane's TM x TN results are (TM/4) x (TN/4) blocks of 4x4
//    spaced WM/(TM/4) rows and WN/(TN/4) columns apart (e.g. 2x2 blocks half the warp tile
//    apart), not one contiguous TM x TN block as in matmul_8.
//  - So at every step k the lanes of a quarter-warp read consecutive float4s of the B row (or
//    one shared float4 of the A column, a broadcast): every fragment read is one conflict-free
//    128-bit shared load, where matmul_8's contiguous 8-wide blocks made lanes 2 float4s apart
//    collide in the same banks. Each warp reads only WM+WN values per step for its WM*WN FMAs.
//  - The A tile is stored transposed with its rows padded by 4 floats (As[k][BM+4]). The loader
//    gives a warp 16 rows x 8 columns of A: two lanes per row read the two halves of a 32-byte
//    sector (full sectors), and the padding shifts the second half's column k+4 by 16 banks, so
//    the transposing scalar stores of a warp hit 32 distinct banks.
//  - With STAGGER=1 the next tile travels in two halves: its A part is loaded at the start of a
//    tile and stored to the other stage half-way, then its B part is loaded and stored after
//    the last step, so only half a tile is held in registers at any time (fewer registers,
//    less latency hiding for B); STAGGER=0 loads all of it at the start, as matmul_8 does.
//  - BK = 8 as in the article: 64 accumulators + 2x16 fragments + staging fit 128 registers
//    (two 256-thread blocks per SM) without spills; BK = 16 halves the barriers per FMA but
//    spills at that cap (its unroll lets the scheduler hoist fragment reads further ahead).
//  - C is written as float4 rows: a quarter-warp writes whole 128-byte lines (WN/TN = 8 lanes).
// Edges: tile loads outside A or B read zero (which adds nothing), stores outside C are skipped.
//  Global loads are float4 when the row stride allows 16-byte alignment (K % 4 == 0 for A,
//  N % 4 == 0 for B, N % 4 == 0 for the stores of C); otherwise each of the four elements is
//  loaded or stored on its own under its own guard. Those tests are uniform across the kernel.
//  Every thread reaches every barrier (the loop trip count depends on K only).
// CUDA only: __launch_bounds__ asks for two 256-thread blocks per SM (at most 128 registers),
//  which OpenCL C cannot express; the algorithm is otherwise the one of matmul_9.cl.
//
// One barrier per tile is race-free. Iteration t reads stage s = t%2 and writes stage s^1:
//  - the writes of tile t+1 into stage s^1 come after this thread's last read of stage s^1,
//    which was in iteration t-1, before barrier B(t-1); every thread has passed B(t-1)
//    before anyone writes in iteration t, so nobody still reads what is being overwritten;
//  - the reads of tile t+1 from stage s^1 (the k=0 fragment after B(t), then iteration t+1)
//    come after barrier B(t), which follows all the writes of tile t+1;
//  - stage s is written next in iteration t+1, after B(t), which follows every read of tile t
//    (the last fragment, k=BK-1, is read before B(t); only its FMAs run after it).

#ifndef BM
#define BM 128  // rows of C per block
#endif
#ifndef BN
#define BN 128  // columns of C per block
#endif
#ifndef BK
#define BK 8    // depth of the A and B tiles staged in shared memory per step
#endif
#ifndef WM
#define WM 32   // rows of C per warp
#endif
#ifndef WN
#define WN 64   // columns of C per warp
#endif
#ifndef TM
#define TM 8    // rows of C per thread: TM/4 blocks of 4 rows
#endif
#ifndef TN
#define TN 8    // columns of C per thread: TN/4 blocks of 4 columns
#endif
#ifndef STAGGER
#define STAGGER 1  // 1: next tile's A part stored half-way and B part loaded then; 0: all at once
#endif

#define WARP 32                                 // threads per warp
#define WARPS_N (BN / WN)                       // warps along N
#define THREADS ((BM / WM) * WARPS_N * WARP)    // threads per block
#define LANES_N (WN / TN)                       // lanes of a warp along N
#define SUB_M (TM / 4)                          // 4x4 blocks per thread along M
#define SUB_N (TN / 4)                          // 4x4 blocks per thread along N
#define SUB_M_STRIDE (WM / SUB_M)               // rows between a thread's 4x4 blocks
#define SUB_N_STRIDE (WN / SUB_N)               // columns between a thread's 4x4 blocks
#define AS_LD (BM + 4)                          // padded row of the transposed A tile
#define A_LOADS (BM * BK / (4 * THREADS))       // float4 loads of the A tile per thread
#define B_LOADS (BK * BN / (4 * THREADS))       // float4 loads of the B tile per thread
// Two blocks of 256 threads per SM when they fit: caps registers at 128 per thread.
#define MIN_BLOCKS_PER_SM (THREADS <= 256 ? 2 : 1)
// Step of a tile at which the next tile's A part is stored and its B part loaded: half-way
// when staggered, else after the last step (B is then loaded with A, at the start).
#define SWAP_STEP (STAGGER ? BK / 2 : BK)

// Four consecutive elements (row, col..col+3) of a row-major rows x cols matrix; elements outside
// the matrix read as zero. vec_ok (cols % 4 == 0) means the four are all inside or all outside
// and 16-byte aligned, so one float4 load does.
__device__ __forceinline__ float4 load4_guarded(const float* __restrict__ X, const int row, const int col,
                                                const int rows, const int cols,
                                                const int vec_ok) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (row < rows) {
        const float* p = X + row * cols + col;
        if (vec_ok) {
            if (col < cols) v = *reinterpret_cast<const float4*>(p);
        } else {
            if (col < cols) v.x = p[0];
            if (col + 1 < cols) v.y = p[1];
            if (col + 2 < cols) v.z = p[2];
            if (col + 3 < cols) v.w = p[3];
        }
    }
    return v;
}

// Stores four consecutive elements (row, col..col+3) of C, skipping those outside it.
__device__ __forceinline__ void store4_guarded(float* __restrict__ X, const int row, const int col, const int rows,
                                               const int cols, const int vec_ok,
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

// Where float4 number f (= tid + i*THREADS) of the A tile comes from: warp-sized chunks of 32
// cover 16 rows x 8 columns (lanes 0-15: columns 0-3 of rows 0-15; lanes 16-31: columns 4-7);
// chunks walk down the BM rows first, then to the next 8 columns.
#define A_TILE_ROW(f) ((((f) / WARP) % (BM / 16)) * 16 + ((f) % 16))
#define A_TILE_COL(f) ((((f) / WARP) / (BM / 16)) * 8 + (((f) % WARP) / 16) * 4)
// Float4 number f of the B tile: row-major, BN/4 float4s per row.
#define B_TILE_ROW(f) ((f) / (BN / 4))
#define B_TILE_COL(f) (((f) % (BN / 4)) * 4)

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS_PER_SM)
matmul_9(const int M, const int N, const int K, const float* __restrict__ A,
         const float* __restrict__ B, float* __restrict__ C) {
    __shared__ __align__(16) float As[2][BK][AS_LD];  // A tile transposed: [k][m]
    __shared__ __align__(16) float Bs[2][BK][BN];  // B tile as it is: [k][n]

    const int tid = threadIdx.x;
    const int warp = tid / WARP;
    const int lane = tid % WARP;
    // First row / column of this thread's first 4x4 block, within the block tile.
    const int m_base = (warp / WARPS_N) * WM + (lane / LANES_N) * 4;
    const int n_base = (warp % WARPS_N) * WN + (lane % LANES_N) * 4;
    const int block_row = blockIdx.y * BM;
    const int block_col = blockIdx.x * BN;
    const int a_vec = (K % 4) == 0;
    const int b_vec = (N % 4) == 0;

    float4 a_next[A_LOADS];  // the next tile, in flight from global memory
    float4 b_next[B_LOADS];
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;
    float a_frag[2][TM];  // two sets: step k+1 is read while step k is computed
    float b_frag[2][TN];

    // Prologue: tile 0 into stage 0, then the k=0 fragments into set 0.
#pragma unroll
    for (int i = 0; i < A_LOADS; i++) {
        const int f = tid + i * THREADS;
        a_next[i] = load4_guarded(A, block_row + A_TILE_ROW(f), A_TILE_COL(f), M, K, a_vec);
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; i++) {
        const int f = tid + i * THREADS;
        b_next[i] = load4_guarded(B, B_TILE_ROW(f), block_col + B_TILE_COL(f), K, N, b_vec);
    }
#pragma unroll
    for (int i = 0; i < A_LOADS; i++) {
        const int f = tid + i * THREADS;
        As[0][A_TILE_COL(f)][A_TILE_ROW(f)] = a_next[i].x;
        As[0][A_TILE_COL(f) + 1][A_TILE_ROW(f)] = a_next[i].y;
        As[0][A_TILE_COL(f) + 2][A_TILE_ROW(f)] = a_next[i].z;
        As[0][A_TILE_COL(f) + 3][A_TILE_ROW(f)] = a_next[i].w;
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; i++) {
        const int f = tid + i * THREADS;
        *reinterpret_cast<float4*>(&Bs[0][B_TILE_ROW(f)][B_TILE_COL(f)]) = b_next[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < SUB_M; i++) {
        const float4 v = *reinterpret_cast<const float4*>(&As[0][0][m_base + i * SUB_M_STRIDE]);
        a_frag[0][4 * i] = v.x; a_frag[0][4 * i + 1] = v.y; a_frag[0][4 * i + 2] = v.z; a_frag[0][4 * i + 3] = v.w;
    }
#pragma unroll
    for (int j = 0; j < SUB_N; j++) {
        const float4 v = *reinterpret_cast<const float4*>(&Bs[0][0][n_base + j * SUB_N_STRIDE]);
        b_frag[0][4 * j] = v.x; b_frag[0][4 * j + 1] = v.y; b_frag[0][4 * j + 2] = v.z; b_frag[0][4 * j + 3] = v.w;
    }

    const int num_tiles = (K + BK - 1) / BK;
    for (int t = 0; t < num_tiles; t++) {
        const int cur = t & 1;
        const int has_next = t + 1 < num_tiles;  // uniform across the block
        const int k_next = (t + 1) * BK;

        // 1. Issue the global loads of tile t+1's A part (and B part unless staggered); they
        //    complete while steps 0 .. SWAP_STEP-1 of tile t compute.
        if (has_next) {
#pragma unroll
            for (int i = 0; i < A_LOADS; i++) {
                const int f = tid + i * THREADS;
                a_next[i] = load4_guarded(A, block_row + A_TILE_ROW(f), k_next + A_TILE_COL(f),
                                          M, K, a_vec);
            }
            if (!STAGGER) {
#pragma unroll
                for (int i = 0; i < B_LOADS; i++) {
                    const int f = tid + i * THREADS;
                    b_next[i] = load4_guarded(B, k_next + B_TILE_ROW(f), block_col + B_TILE_COL(f),
                                              K, N, b_vec);
                }
            }
        }

        // 2. Steps k = 0 .. BK-2 of tile t: read the fragments of step k+1, then FMA step k.
        //    Staggered, at step SWAP_STEP = BK/2 the A part of tile t+1 goes into the other
        //    stage and the loads of its B part are issued (stored after the last step), so only
        //    half a tile is held in registers (stage cur^1 may be written at any point of this
        //    iteration: see the header).
#pragma unroll
        for (int k = 0; k < BK - 1; k++) {
            if (STAGGER && k == SWAP_STEP && has_next) {
#pragma unroll
                for (int i = 0; i < A_LOADS; i++) {
                    const int f = tid + i * THREADS;
                    As[cur ^ 1][A_TILE_COL(f)][A_TILE_ROW(f)] = a_next[i].x;
                    As[cur ^ 1][A_TILE_COL(f) + 1][A_TILE_ROW(f)] = a_next[i].y;
                    As[cur ^ 1][A_TILE_COL(f) + 2][A_TILE_ROW(f)] = a_next[i].z;
                    As[cur ^ 1][A_TILE_COL(f) + 3][A_TILE_ROW(f)] = a_next[i].w;
                }
#pragma unroll
                for (int i = 0; i < B_LOADS; i++) {
                    const int f = tid + i * THREADS;
                    b_next[i] = load4_guarded(B, k_next + B_TILE_ROW(f), block_col + B_TILE_COL(f),
                                              K, N, b_vec);
                }
            }
#pragma unroll
            for (int i = 0; i < SUB_M; i++) {
                const float4 v = *reinterpret_cast<const float4*>(&As[cur][k + 1][m_base + i * SUB_M_STRIDE]);
                a_frag[(k + 1) % 2][4 * i] = v.x;
                a_frag[(k + 1) % 2][4 * i + 1] = v.y;
                a_frag[(k + 1) % 2][4 * i + 2] = v.z;
                a_frag[(k + 1) % 2][4 * i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < SUB_N; j++) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[cur][k + 1][n_base + j * SUB_N_STRIDE]);
                b_frag[(k + 1) % 2][4 * j] = v.x;
                b_frag[(k + 1) % 2][4 * j + 1] = v.y;
                b_frag[(k + 1) % 2][4 * j + 2] = v.z;
                b_frag[(k + 1) % 2][4 * j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++)
                    acc[i][j] = fmaf(a_frag[k % 2][i], b_frag[k % 2][j], acc[i][j]);
        }

        // 3. Store the B part of tile t+1 (and A part unless staggered) into the other stage.
        if (has_next) {
            if (!STAGGER) {
#pragma unroll
                for (int i = 0; i < A_LOADS; i++) {
                    const int f = tid + i * THREADS;
                    As[cur ^ 1][A_TILE_COL(f)][A_TILE_ROW(f)] = a_next[i].x;
                    As[cur ^ 1][A_TILE_COL(f) + 1][A_TILE_ROW(f)] = a_next[i].y;
                    As[cur ^ 1][A_TILE_COL(f) + 2][A_TILE_ROW(f)] = a_next[i].z;
                    As[cur ^ 1][A_TILE_COL(f) + 3][A_TILE_ROW(f)] = a_next[i].w;
                }
            }
#pragma unroll
            for (int i = 0; i < B_LOADS; i++) {
                const int f = tid + i * THREADS;
                *reinterpret_cast<float4*>(&Bs[cur ^ 1][B_TILE_ROW(f)][B_TILE_COL(f)]) = b_next[i];
            }
        }
        __syncthreads();  // the one barrier per tile

        // 4. Read the k=0 fragments of tile t+1 into set 0 (free: BK is even, so the last
        //    step of tile t uses set 1), then FMA that last step.
        if (has_next) {
#pragma unroll
            for (int i = 0; i < SUB_M; i++) {
                const float4 v = *reinterpret_cast<const float4*>(&As[cur ^ 1][0][m_base + i * SUB_M_STRIDE]);
                a_frag[0][4 * i] = v.x; a_frag[0][4 * i + 1] = v.y; a_frag[0][4 * i + 2] = v.z; a_frag[0][4 * i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < SUB_N; j++) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[cur ^ 1][0][n_base + j * SUB_N_STRIDE]);
                b_frag[0][4 * j] = v.x; b_frag[0][4 * j + 1] = v.y; b_frag[0][4 * j + 2] = v.z; b_frag[0][4 * j + 3] = v.w;
            }
        }
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TN; j++)
                acc[i][j] = fmaf(a_frag[(BK - 1) % 2][i], b_frag[(BK - 1) % 2][j], acc[i][j]);
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
