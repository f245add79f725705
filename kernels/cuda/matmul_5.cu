// matmul_5: transposed input and rectangular tiles (myGEMM step 5, adapted to row-major C = A*B).
// CUDA mirror of kernels/opencl/matmul_5.cl: the same algorithm, line for line.
//
// What changes over matmul_3/4:
//  - A pre-pass (transpose_pre, below, launched first) writes AT = A^T, a K x M row-major
//    scratch buffer. myGEMM (column-major) transposes B; in row-major the operand whose rows run
//    along K instead of along a dimension of C is A, so A is the one transposed here.
//  - Tiles are rectangular: a block computes a TSM x TSN tile of C and steps through K in
//    slices of TSK, so the tile shape and the depth of the shared tiles are tuned separately.
//  - A block is TSN x RTSM threads (RTSM = TSM/WPTM); each thread computes WPTM
//    elements of one C column, in WPTM consecutive rows.
//  - Loading is decoupled from computing: the block's threads are numbered 0..THREADS-1
//    and load the tiles in that order, LPTA (LPTB) elements each.
//
// Why the transpose: after it, both tiles are TSK rows of TSM (TSN) floats that are contiguous in
// global memory, loaded by the same code in runs as long as the tile is wide, and stored
// k-major in shared memory (Asub[k][m], Bsub[k][n]) as straight copies: consecutive threads
// write consecutive words, with no bank conflicts. Without it, an A tile is TSM runs of only
// TSK floats, and getting it k-major would be a transposing store into shared memory, which
// conflicts on banks (or needs padding). With k-major tiles, the inner loop reads Bsub[k][col]
// (consecutive threads, consecutive words) and Asub[k][m0 .. m0+WPTM-1], the same
// WPTM contiguous words for every thread of a warp: one broadcast, which the compiler can
// fetch as wide shared loads because the words are contiguous. Larger rectangular tiles also
// cut global (L2) traffic per flop. The pre-pass costs one read and one write of A (about 1% of
// the run time at 4096), and both launches are timed together.
//
// Edges (any M, N, K >= 1): the pre-pass guards its reads and writes; the matmul grid is rounded
// up to whole tiles, tile loads outside AT or B write zeros into shared memory, and only
// in-range elements of C are stored. Every thread runs every tile iteration, so all reach
// every barrier.

#ifndef TSM
#define TSM 64         // tile size in M: rows of C per block
#endif
#ifndef TSN
#define TSN 64         // tile size in N: columns of C per block (= threads along N)
#endif
#ifndef TSK
#define TSK 32         // tile size in K: depth of the A and B tiles in shared memory
#endif
#ifndef WPTM
#define WPTM 16        // work per thread in M: consecutive C rows per thread
#endif
#ifndef TRANS_TS
#define TRANS_TS 32    // tile size of the transpose pre-pass (TRANS_TS x TRANS_TS threads)
#endif
#define RTSM (TSM / WPTM)                  // reduced tile size: threads along M
#define THREADS (TSN * RTSM)               // threads per block
#define LPTA ((TSK * TSM) / THREADS)       // loads per thread for the A tile
#define LPTB ((TSK * TSN) / THREADS)       // loads per thread for the B tile

// Pre-pass: dst (cols x rows) = src^T for a row-major rows x cols src. Called with
// (M, K, A, AT). A TRANS_TS x TRANS_TS tile goes through shared memory so that both the read and
// the write are coalesced; the +1 padding puts a tile column in distinct banks.
extern "C" __global__ void transpose_pre(const int rows, const int cols,
                                         const float* __restrict__ src, float* __restrict__ dst)
{
    __shared__ float tile[TRANS_TS][TRANS_TS + 1];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int src_col = blockIdx.x * TRANS_TS + tx;
    const int src_row = blockIdx.y * TRANS_TS + ty;
    tile[ty][tx] = (src_row < rows && src_col < cols) ? src[src_row * cols + src_col] : 0.0f;
    __syncthreads();
    const int dst_row = blockIdx.x * TRANS_TS + ty;        // a column of src
    const int dst_col = blockIdx.y * TRANS_TS + tx;        // a row of src
    if (dst_row < cols && dst_col < rows) {
        dst[dst_row * rows + dst_col] = tile[tx][ty];
    }
}

extern "C" __global__ void matmul_5(const int M, const int N, const int K,
                                    const float* __restrict__ AT, const float* __restrict__ B,
                                    float* __restrict__ C)
{
    const int local_col = threadIdx.x;                  // 0 .. TSN-1, along N
    const int local_row = threadIdx.y;                  // 0 .. RTSM-1, along M
    const int tid = local_row * TSN + local_col;        // 0 .. THREADS-1, for the tile loads
    const int tile_row0 = blockIdx.y * TSM;             // first row of this block's C tile
    const int tile_col0 = blockIdx.x * TSN;             // first column of this block's C tile
    const int col = tile_col0 + local_col;              // the C column this thread computes
    const int row_in_tile0 = local_row * WPTM;          // its first row inside the tile

    // Asub[k][m]: a TSK x TSM tile of AT. Aligned to 16 bytes so that a thread's WPTM
    // contiguous words can be read as float4s (the compiler only fuses reads it can prove aligned).
    __shared__ __align__(16) float Asub[TSK][TSM];
    __shared__ float Bsub[TSK][TSN];   // Bsub[k][n]: a TSK x TSN tile of B

    float acc[WPTM];
    #pragma unroll
    for (int w = 0; w < WPTM; w++) {
        acc[w] = 0.0f;
    }

    const int num_tiles = (K + TSK - 1) / TSK;
    for (int t = 0; t < num_tiles; t++) {
        const int tile_k0 = t * TSK;

        // Both tiles are TSK rows of contiguous floats; thread tid loads elements
        // tid, tid + THREADS, ... in row-major order, so a warp reads consecutive addresses.
        #pragma unroll
        for (int l = 0; l < LPTA; l++) {
            const int idx = tid + l * THREADS;
            const int k = idx / TSM;
            const int m = idx % TSM;
            const int a_row = tile_k0 + k;              // row of AT = column of A
            const int a_col = tile_row0 + m;            // column of AT = row of A
            Asub[k][m] = (a_row < K && a_col < M) ? AT[a_row * M + a_col] : 0.0f;
        }
        #pragma unroll
        for (int l = 0; l < LPTB; l++) {
            const int idx = tid + l * THREADS;
            const int k = idx / TSN;
            const int n = idx % TSN;
            const int b_row = tile_k0 + k;
            const int b_col = tile_col0 + n;
            Bsub[k][n] = (b_row < K && b_col < N) ? B[b_row * N + b_col] : 0.0f;
        }
        __syncthreads();

        #pragma unroll
        for (int k = 0; k < TSK; k++) {
            const float b = Bsub[k][local_col];          // one read, reused WPTM times
            #pragma unroll
            for (int w = 0; w < WPTM; w++) {
                acc[w] += Asub[k][row_in_tile0 + w] * b;
            }
        }
        __syncthreads();                // the tiles are consumed before the next ones land
    }

    #pragma unroll
    for (int w = 0; w < WPTM; w++) {
        const int row = tile_row0 + row_in_tile0 + w;
        if (row < M && col < N) {
            C[row * N + col] = acc[w];
        }
    }
}
