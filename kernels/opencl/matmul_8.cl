// matmul_8: data prefetching, C = A * B (row-major; A is MxK, B is KxN, C is MxN).
// Over matmul_7: every pipeline stage is double-buffered, so loads overlap arithmetic.
//  - Two stages of local memory. While the work-group computes on tile t (stage t%2), each
//    work-item has already issued the global loads of tile t+1 into registers; only after its
//    BK rank-1 updates does it store them to the other stage. Global latency hides behind the
//    arithmetic, and a single barrier per tile is enough (the ordering is argued below).
//  - Two sets of register fragments: the A column and B row for step k+1 are read from local
//    memory while the FMAs of step k run, hiding local-memory latency too.
//  - The A tile is stored transposed, As[k][m], so a work-item's TM values of A at step k are
//    contiguous and are read as float4, like its TN values of B.
//  Each work-item computes a TM x TN block of C (TM contiguous rows, TN contiguous columns),
//  BM x BN per work-group (the article's bm=bn=128, bk=8, rm=rn=8 with 256 work-items).
// Edges: tile loads outside A or B read zero (which adds nothing), stores outside C are skipped.
//  Global loads are float4 when the row stride allows 16-byte alignment (K % 4 == 0 for A,
//  N % 4 == 0 for B, N % 4 == 0 for the stores of C); otherwise each of the four elements is
//  loaded or stored on its own under its own guard. Those tests are uniform across the kernel.
//  Every work-item reaches every barrier (the loop trip count depends on K only).
//
// One barrier per tile is race-free. Iteration t reads stage s = t%2 and writes stage s^1:
//  - the writes of tile t+1 into stage s^1 come after this work-item's last read of stage s^1,
//    which was in iteration t-1, before barrier B(t-1); every work-item has passed B(t-1)
//    before anyone writes in iteration t, so nobody still reads what is being overwritten;
//  - the reads of tile t+1 from stage s^1 (the k=0 fragment after B(t), then iteration t+1)
//    come after barrier B(t), which follows all the writes of tile t+1;
//  - stage s is written next in iteration t+1, after B(t), which follows every read of tile t
//    (the last fragment, k=BK-1, is read before B(t); only its FMAs run after it).

#ifndef BM
#define BM 128  // rows of C per work-group
#endif
#ifndef BN
#define BN 128  // columns of C per work-group
#endif
#ifndef BK
#define BK 8    // depth of the A and B tiles staged in local memory per step
#endif
#ifndef TM
#define TM 8    // rows of C per work-item (contiguous)
#endif
#ifndef TN
#define TN 8    // columns of C per work-item (contiguous)
#endif

#define THREADS_N (BN / TN)                     // work-items along N (dimension 0)
#define THREADS_M (BM / TM)                     // work-items along M (dimension 1)
#define THREADS (THREADS_N * THREADS_M)         // work-items per work-group
#define A_LOADS (BM * BK / (4 * THREADS))       // float4 loads of the A tile per work-item
#define B_LOADS (BK * BN / (4 * THREADS))       // float4 loads of the B tile per work-item

// Four consecutive elements (row, col..col+3) of a row-major rows x cols matrix; elements outside
// the matrix read as zero. vec_ok (cols % 4 == 0) means the four are all inside or all outside
// and 16-byte aligned, so one float4 load does.
inline float4 load4_guarded(const __global float* X, const int row, const int col,
                            const int rows, const int cols, const int vec_ok) {
    float4 v = (float4)(0.0f);
    if (row < rows) {
        const __global float* p = X + row * cols + col;
        if (vec_ok) {
            if (col < cols) v = *((const __global float4*)p);
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

__kernel __attribute__((reqd_work_group_size(THREADS_N, THREADS_M, 1)))
void matmul_8(const int M, const int N, const int K,
              const __global float* A, const __global float* B, __global float* C) {
    __local float As[2][BK][BM] __attribute__((aligned(16)));  // A tile, transposed: [k][m]
    __local float Bs[2][BK][BN] __attribute__((aligned(16)));  // B tile as it is: [k][n]

    const int tx = get_local_id(0);  // column group of this work-item
    const int ty = get_local_id(1);  // row group of this work-item
    const int tid = ty * THREADS_N + tx;
    const int block_row = get_group_id(1) * BM;
    const int block_col = get_group_id(0) * BN;
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
        *((__local float4*)&Bs[0][f / (BN / 4)][4 * (f % (BN / 4))]) = b_next[i];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int i = 0; i < TM; i += 4) {
        const float4 v = *((const __local float4*)&As[0][0][ty * TM + i]);
        a_frag[0][i] = v.x; a_frag[0][i + 1] = v.y; a_frag[0][i + 2] = v.z; a_frag[0][i + 3] = v.w;
    }
#pragma unroll
    for (int j = 0; j < TN; j += 4) {
        const float4 v = *((const __local float4*)&Bs[0][0][tx * TN + j]);
        b_frag[0][j] = v.x; b_frag[0][j + 1] = v.y; b_frag[0][j + 2] = v.z; b_frag[0][j + 3] = v.w;
    }

    const int num_tiles = (K + BK - 1) / BK;
    for (int t = 0; t < num_tiles; t++) {
        const int cur = t & 1;
        const int has_next = t + 1 < num_tiles;  // uniform across the work-group
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
                const float4 v = *((const __local float4*)&As[cur][k + 1][ty * TM + i]);
                a_frag[(k + 1) % 2][i] = v.x;
                a_frag[(k + 1) % 2][i + 1] = v.y;
                a_frag[(k + 1) % 2][i + 2] = v.z;
                a_frag[(k + 1) % 2][i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 v = *((const __local float4*)&Bs[cur][k + 1][tx * TN + j]);
                b_frag[(k + 1) % 2][j] = v.x;
                b_frag[(k + 1) % 2][j + 1] = v.y;
                b_frag[(k + 1) % 2][j + 2] = v.z;
                b_frag[(k + 1) % 2][j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++)
                    acc[i][j] = fma(a_frag[k % 2][i], b_frag[k % 2][j], acc[i][j]);
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
                *((__local float4*)&Bs[cur ^ 1][f / (BN / 4)][4 * (f % (BN / 4))]) = b_next[i];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);  // the one barrier per tile

        // 4. Read the k=0 fragments of tile t+1 into set 0 (free: BK is even, so the last
        //    step of tile t uses set 1), then FMA that last step.
        if (has_next) {
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 v = *((const __local float4*)&As[cur ^ 1][0][ty * TM + i]);
                a_frag[0][i] = v.x; a_frag[0][i + 1] = v.y; a_frag[0][i + 2] = v.z; a_frag[0][i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 v = *((const __local float4*)&Bs[cur ^ 1][0][tx * TN + j]);
                b_frag[0][j] = v.x; b_frag[0][j + 1] = v.y; b_frag[0][j + 2] = v.z; b_frag[0][j + 3] = v.w;
            }
        }
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TN; j++)
                acc[i][j] = fma(a_frag[(BK - 1) % 2][i], b_frag[(BK - 1) % 2][j], acc[i][j]);
    }

    // Epilogue: each row of the TM x TN block as TN/4 float4 stores.
#pragma unroll
    for (int i = 0; i < TM; i++) {
        const int row = block_row + ty * TM + i;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            store4_guarded(C, row, block_col + tx * TN + j, M, N, b_vec,
                           (float4)(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
        }
    }
}
