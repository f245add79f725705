// matmul_8: data prefetching, C = A * B (row-major; A is MxK, B is KxN, C is MxN).
// Over matmul_7: every pipeline stage is double-buffered, so loads overlap arithmetic.
//  - Two stages of shared memory. While the block computes on tile t (stage t%2), each
//    thread has already issued the global loads of tile t+1 into registers; only after its
//    BK rank-1 updates does it store them to the other stage. Global latency hides behind the
//    arithmetic, and a single barrier per tile is enough (the ordering is argued below).
//  - Two sets of register fragments: the A column and B row for step k+1 are read from shared
//    memory while the FMAs of step k run, hiding shared-memory latency too.
//  - The A tile is stored transposed, As[k][m], so a thread's TM values of A at step k are
//    contiguous and are read as float4, like its TN values of B.
//  Each thread computes a TM x TN block of C (TM contiguous rows, TN contiguous columns),
//  BM x BN per block (the article's bm=bn=128, bk=8, rm=rn=8 with 256 threads).
// Edges: tile loads outside A or B read zero (which adds nothing), stores outside C are skipped.
//  Global loads are float4 when the row stride allows 16-byte alignment (K % 4 == 0 for A,
//  N % 4 == 0 for B, N % 4 == 0 for the stores of C); otherwise each of the four elements is
//  loaded or stored on its own under its own guard. Those tests are uniform across the kernel.
//  Every thread reaches every barrier (the loop trip count depends on K only).
// CUDA only: __launch_bounds__ asks for two 256-thread blocks per SM (at most 128 registers),
//  which OpenCL C cannot express; the algorithm is otherwise the one of matmul_8.cl.
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
#ifndef TM
#define TM 8    // rows of C per thread (contiguous)
#endif
#ifndef TN
#define TN 8    // columns of C per thread (contiguous)
#endif

#define THREADS_N (BN / TN)                     // threads along N (dimension 0)
#define THREADS_M (BM / TM)                     // threads along M (dimension 1)
#define THREADS (THREADS_N * THREADS_M)         // threads per block
#define A_LOADS (BM * BK / (4 * THREADS))       // float4 loads of the A tile per thread
#define B_LOADS (BK * BN / (4 * THREADS))       // float4 loads of the B tile per thread
// Two blocks of 256 threads per SM when they fit: caps registers at 128 per thread.
#define MIN_BLOCKS_PER_SM (THREADS <= 256 ? 2 : 1)

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

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS_PER_SM)
matmul_8(const int M, const int N, const int K, const float* __restrict__ A,
         const float* __restrict__ B, float* __restrict__ C) {
    __shared__ __align__(16) float As[2][BK][BM];  // A tile, transposed: [k][m]
    __shared__ __align__(16) float Bs[2][BK][BN];  // B tile as it is: [k][n]

    const int tx = threadIdx.x;  // column group of this thread
    const int ty = threadIdx.y;  // row group of this thread
    const int tid = ty * THREADS_N + tx;
    const int block_row = blockIdx.y * BM;
    const int block_col = blockIdx.x * BN;
    const int a_vec = (K % 4) == 0;
    const int b_vec = (N % 4) == 0;

    // Tile loading: float4 number f = tid + i*THREADS of the A tile is row f / (BK/4), columns
    // 4*(f % (BK/4)) .. +3; of the B tile, row f / (BN/4), columns 4*(f % (BN/4)) .. +3.
    float4 a_next[A_LOADS];
    float4 b_next[B_LOADS];

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;
    float a_frag[2][TM];
    float b_frag[2][TN];

    // Prologue: tile 0 into stage 0, then the k=0 fragments into register set 0.
#pragma unroll
    for (int i = 0; i < A_LOADS; i++) {
        const int f = tid + i * THREADS;
        a_next[i] = load4_guarded(A, block_row + f / (BK / 4), 4 * (f % (BK / 4)), M, K, a_vec);
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; i++) {
        const int f = tid + i * THREADS;
        b_next[i] = load4_guarded(B, f / (BN / 4), block_col + 4 * (f % (BN / 4)), K, N, b_vec);
    }
#pragma unroll
    for (int i = 0; i < A_LOADS; i++) {
        const int f = tid + i * THREADS;
        const int m = f / (BK / 4);
        const int k = 4 * (f % (BK / 4));
        As[0][k][m] = a_next[i].x;
        As[0][k + 1][m] = a_next[i].y;
        As[0][k + 2][m] = a_next[i].z;
        As[0][k + 3][m] = a_next[i].w;
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; i++) {
        const int f = tid + i * THREADS;
        *reinterpret_cast<float4*>(&Bs[0][f / (BN / 4)][4 * (f % (BN / 4))]) = b_next[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < TM; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(&As[0][0][ty * TM + i]);
        a_frag[0][i] = v.x; a_frag[0][i + 1] = v.y; a_frag[0][i + 2] = v.z; a_frag[0][i + 3] = v.w;
    }
#pragma unroll
    for (int j = 0; j < TN; j += 4) {
        const float4 v = *reinterpret_cast<const float4*>(&Bs[0][0][tx * TN + j]);
        b_frag[0][j] = v.x; b_frag[0][j + 1] = v.y; b_frag[0][j + 2] = v.z; b_frag[0][j + 3] = v.w;
    }

    const int num_tiles = (K + BK - 1) / BK;
    for (int t = 0; t < num_tiles; t++) {
        const int cur = t & 1;
        const int has_next = t + 1 < num_tiles;  // uniform across the block
        const int k_next = (t + 1) * BK;

        // 1. Issue the global loads of tile t+1; they complete while we compute tile t.
        if (has_next) {
#pragma unroll
            for (int i = 0; i < A_LOADS; i++) {
                const int f = tid + i * THREADS;
                a_next[i] = load4_guarded(A, block_row + f / (BK / 4), k_next + 4 * (f % (BK / 4)),
                                          M, K, a_vec);
            }
#pragma unroll
            for (int i = 0; i < B_LOADS; i++) {
                const int f = tid + i * THREADS;
                b_next[i] = load4_guarded(B, k_next + f / (BN / 4), block_col + 4 * (f % (BN / 4)),
                                          K, N, b_vec);
            }
        }

        // 2. Steps k = 0 .. BK-2 of tile t: read the fragments of step k+1, then FMA step k.
#pragma unroll
        for (int k = 0; k < BK - 1; k++) {
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&As[cur][k + 1][ty * TM + i]);
                a_frag[(k + 1) % 2][i] = v.x;
                a_frag[(k + 1) % 2][i + 1] = v.y;
                a_frag[(k + 1) % 2][i + 2] = v.z;
                a_frag[(k + 1) % 2][i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[cur][k + 1][tx * TN + j]);
                b_frag[(k + 1) % 2][j] = v.x;
                b_frag[(k + 1) % 2][j + 1] = v.y;
                b_frag[(k + 1) % 2][j + 2] = v.z;
                b_frag[(k + 1) % 2][j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++)
                    acc[i][j] = fmaf(a_frag[k % 2][i], b_frag[k % 2][j], acc[i][j]);
        }

        // 3. Store tile t+1 into the other stage (nobody reads it any more: see the header).
        if (has_next) {
#pragma unroll
            for (int i = 0; i < A_LOADS; i++) {
                const int f = tid + i * THREADS;
                const int m = f / (BK / 4);
                const int k = 4 * (f % (BK / 4));
                As[cur ^ 1][k][m] = a_next[i].x;
                As[cur ^ 1][k + 1][m] = a_next[i].y;
                As[cur ^ 1][k + 2][m] = a_next[i].z;
                As[cur ^ 1][k + 3][m] = a_next[i].w;
            }
#pragma unroll
            for (int i = 0; i < B_LOADS; i++) {
                const int f = tid + i * THREADS;
                *reinterpret_cast<float4*>(&Bs[cur ^ 1][f / (BN / 4)][4 * (f % (BN / 4))]) = b_next[i];
            }
        }
        __syncthreads();  // the one barrier per tile

        // 4. Read the k=0 fragments of tile t+1 into set 0 (free: BK is even, so the last
        //    step of tile t uses set 1), then FMA that last step.
        if (has_next) {
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&As[cur ^ 1][0][ty * TM + i]);
                a_frag[0][i] = v.x; a_frag[0][i + 1] = v.y; a_frag[0][i + 2] = v.z; a_frag[0][i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[cur ^ 1][0][tx * TN + j]);
                b_frag[0][j] = v.x; b_frag[0][j + 1] = v.y; b_frag[0][j + 2] = v.z; b_frag[0][j + 3] = v.w;
            }
        }
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TN; j++)
                acc[i][j] = fmaf(a_frag[(BK - 1) % 2][i], b_frag[(BK - 1) % 2][j], acc[i][j]);
    }

    // Epilogue: each row of the TM x TN block as TN/4 float4 stores.
#pragma unroll
    for (int i = 0; i < TM; i++) {
        const int row = block_row + ty * TM + i;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            store4_guarded(C, row, block_col + tx * TN + j, M, N, b_vec,
                           make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
        }
    }
}
