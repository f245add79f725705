// matmul_2: tiling in shared memory, C = A * B (row-major; A is MxK, B is KxN, C is MxN).
// Over matmul_1: a TS x TS block loads a TS x TS tile of A and one of B into shared memory
// (each thread one element of each, coalesced), waits at a barrier, then every thread reads TS
// values of each tile from fast shared memory. Global traffic drops by a factor of TS.
// Edges: tile loads outside A or B store zero (adding nothing), stores outside C are skipped,
// and every thread takes part in every barrier, so any M, N, K works.

#ifndef TS
#define TS 32  // tile size in M, N and K; the block is TS x TS threads
#endif

extern "C" __global__ void matmul_2(const int M, const int N, const int K,
                                    const float* __restrict__ A, const float* __restrict__ B,
                                    float* __restrict__ C) {
    __shared__ float Asub[TS][TS];
    __shared__ float Bsub[TS][TS];
    const int tx = threadIdx.x;  // column within the tile
    const int ty = threadIdx.y;  // row within the tile
    const int col = blockIdx.x * TS + tx;
    const int row = blockIdx.y * TS + ty;

    float acc = 0.0f;
    const int num_tiles = (K + TS - 1) / TS;
    for (int t = 0; t < num_tiles; t++) {
        const int a_col = t * TS + tx;
        const int b_row = t * TS + ty;
        Asub[ty][tx] = (row < M && a_col < K) ? A[row * K + a_col] : 0.0f;
        Bsub[ty][tx] = (b_row < K && col < N) ? B[b_row * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TS; k++) {
            acc += Asub[ty][k] * Bsub[k][tx];
        }
        __syncthreads();  // the next iteration overwrites the tiles
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
