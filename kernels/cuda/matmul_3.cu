// matmul_3: more work per thread (myGEMM step 3, adapted to row-major C = A*B).
// CUDA mirror of kernels/opencl/matmul_3.cl: the same algorithm, line for line.
//
// What changes over matmul_2: a block still computes one TS x TS tile of C through TS x TS
// tiles of A and B staged in shared memory, but it has only TS x (TS/WPT) threads, and each one
// computes WPT elements of C: one column, WPT rows spaced RTS = TS/WPT apart.
//
// Why it is faster: in the inner loop a thread reads Bsub[k][col] once into a register and
// reuses it for WPT multiply-adds, so shared-memory reads per multiply-add drop from 2 to about
// 1 + 1/WPT. Fewer threads per tile also means fewer index calculations and barrier
// participants per flop.
// The tile loads stay coalesced: threadIdx.x walks along the rows of A, B and C.
//
// Edges (any M, N, K >= 1): the grid is rounded up to whole tiles; tile loads outside A or B
// write zeros into shared memory (a zero adds nothing to the dot products), and only in-range
// elements of C are stored. Every thread runs every tile iteration, so all reach every barrier.

#ifndef TS
#define TS 64          // tile size in M, N and K: a block computes a TS x TS tile of C
#endif
#ifndef WPT
#define WPT 16         // work per thread: C elements per thread, in one column, RTS rows apart
#endif
#define RTS (TS / WPT) // reduced tile size: threads along M in a block

extern "C" __global__ void matmul_3(const int M, const int N, const int K,
                                    const float* __restrict__ A, const float* __restrict__ B,
                                    float* __restrict__ C)
{
    const int local_col = threadIdx.x;                  // 0 .. TS-1, along N
    const int local_row = threadIdx.y;                  // 0 .. RTS-1, along M
    const int tile_row0 = blockIdx.y * TS;              // first row of this block's C tile
    const int col = blockIdx.x * TS + local_col;        // the C column this thread computes

    __shared__ float Asub[TS][TS];   // Asub[m][k]: a TS x TS tile of A
    __shared__ float Bsub[TS][TS];   // Bsub[k][n]: a TS x TS tile of B

    float acc[WPT];
    #pragma unroll
    for (int w = 0; w < WPT; w++) {
        acc[w] = 0.0f;
    }

    const int num_tiles = (K + TS - 1) / TS;
    for (int t = 0; t < num_tiles; t++) {
        const int tile_k0 = t * TS;

        // Each thread loads WPT elements of each tile, RTS rows apart; consecutive
        // threads read consecutive addresses of one row (coalesced).
        #pragma unroll
        for (int w = 0; w < WPT; w++) {
            const int r = local_row + w * RTS;          // row inside the tile
            const int a_row = tile_row0 + r;
            const int a_col = tile_k0 + local_col;
            Asub[r][local_col] = (a_row < M && a_col < K) ? A[a_row * K + a_col] : 0.0f;
            const int b_row = tile_k0 + r;
            Bsub[r][local_col] = (b_row < K && col < N) ? B[b_row * N + col] : 0.0f;
        }
        __syncthreads();

        #pragma unroll
        for (int k = 0; k < TS; k++) {
            const float b = Bsub[k][local_col];          // one read, reused WPT times
            #pragma unroll
            for (int w = 0; w < WPT; w++) {
                acc[w] += Asub[local_row + w * RTS][k] * b;
            }
        }
        __syncthreads();                // the tile is consumed before the next one overwrites it
    }

    #pragma unroll
    for (int w = 0; w < WPT; w++) {
        const int row = tile_row0 + local_row + w * RTS;
        if (row < M && col < N) {
            C[row * N + col] = acc[w];
        }
    }
}
