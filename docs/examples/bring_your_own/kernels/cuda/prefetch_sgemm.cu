// prefetch_sgemm: a template SGEMM in the style of the double-buffered SGEMM article (written
// for gemmlab's examples, not copied): the tile sizes are template parameters named as the
// article names them, and the YAML's entry `Sgemm<BLOCK_SIZE_M, ...>` instantiates them from
// the tiling parameters. Those parameters are therefore not macros (-DBLOCK_SIZE_M=128 would
// turn `const int BLOCK_SIZE_M` into `const int 128`); the runner leaves them out of -D.
//
// Each block computes a BLOCK_SIZE_M x BLOCK_SIZE_N tile of C, each thread a THREAD_SIZE_Y x
// THREAD_SIZE_X block of it in registers. With ENABLE_DOUBLE_BUFFER the next K tile is loaded
// into the other shared-memory buffer while this one is multiplied: one barrier per tile.
// Row-major, C = A·B; loads outside the matrices read zero, stores outside C are skipped, so
// any M, N, K >= 1 is correct.

#include "prefetch_tiles.cuh"

template <const int BLOCK_SIZE_M, const int BLOCK_SIZE_K, const int BLOCK_SIZE_N,
          const int THREAD_SIZE_Y, const int THREAD_SIZE_X, const bool ENABLE_DOUBLE_BUFFER>
__global__ void Sgemm(float* __restrict__ A, float* __restrict__ B, float* __restrict__ C,
                      const int M, const int N, const int K) {
    constexpr int THREADS_X = BLOCK_SIZE_N / THREAD_SIZE_X;
    constexpr int THREADS = THREADS_X * (BLOCK_SIZE_M / THREAD_SIZE_Y);
    constexpr int BUFFERS = ENABLE_DOUBLE_BUFFER ? 2 : 1;
    __shared__ float As[BUFFERS][BLOCK_SIZE_K][BLOCK_SIZE_M];
    __shared__ float Bs[BUFFERS][BLOCK_SIZE_K][BLOCK_SIZE_N];

    const int tid = threadIdx.y * THREADS_X + threadIdx.x;
    const int row0 = blockIdx.y * BLOCK_SIZE_M, col0 = blockIdx.x * BLOCK_SIZE_N;
    const int tiles = (K + BLOCK_SIZE_K - 1) / BLOCK_SIZE_K;

    float acc[THREAD_SIZE_Y][THREAD_SIZE_X] = {};
    float a[THREAD_SIZE_Y], b[THREAD_SIZE_X];

    if (ENABLE_DOUBLE_BUFFER) {
        load_tiles<BLOCK_SIZE_M, BLOCK_SIZE_K, BLOCK_SIZE_N, THREADS>(
            A, B, As[0], Bs[0], M, N, K, row0, col0, 0, tid);
        __syncthreads();
    }
    for (int t = 0; t < tiles; t++) {
        const int current = ENABLE_DOUBLE_BUFFER ? (t & 1) : 0;
        if (ENABLE_DOUBLE_BUFFER) {
            // The other buffer was last read in tile t-1, before that tile's barrier.
            if (t + 1 < tiles)
                load_tiles<BLOCK_SIZE_M, BLOCK_SIZE_K, BLOCK_SIZE_N, THREADS>(
                    A, B, As[current ^ 1], Bs[current ^ 1], M, N, K, row0, col0,
                    (t + 1) * BLOCK_SIZE_K, tid);
        } else {
            load_tiles<BLOCK_SIZE_M, BLOCK_SIZE_K, BLOCK_SIZE_N, THREADS>(
                A, B, As[0], Bs[0], M, N, K, row0, col0, t * BLOCK_SIZE_K, tid);
            __syncthreads();
        }
#pragma unroll
        for (int k = 0; k < BLOCK_SIZE_K; k++) {
#pragma unroll
            for (int i = 0; i < THREAD_SIZE_Y; i++)
                a[i] = As[current][k][threadIdx.y * THREAD_SIZE_Y + i];
#pragma unroll
            for (int j = 0; j < THREAD_SIZE_X; j++)
                b[j] = Bs[current][k][threadIdx.x * THREAD_SIZE_X + j];
#pragma unroll
            for (int i = 0; i < THREAD_SIZE_Y; i++)
#pragma unroll
                for (int j = 0; j < THREAD_SIZE_X; j++)
                    acc[i][j] += a[i] * b[j];
        }
        __syncthreads();  // this buffer is read; the next tile's loads are visible
    }
#pragma unroll
    for (int i = 0; i < THREAD_SIZE_Y; i++) {
        const int row = row0 + threadIdx.y * THREAD_SIZE_Y + i;
#pragma unroll
        for (int j = 0; j < THREAD_SIZE_X; j++) {
            const int col = col0 + threadIdx.x * THREAD_SIZE_X + j;
            if (row < M && col < N) C[row * N + col] = acc[i][j];
        }
    }
}
