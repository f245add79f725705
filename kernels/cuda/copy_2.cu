// copy_2: copy staged through shared memory.
//
// Change over copy_1: each block copies a TILE x TILE tile with TILE x STRIDE threads; a
// thread loads TILE/STRIDE elements (rows ty, ty+STRIDE, ...) into a shared tile, the block
// meets at a barrier, and the same elements go back out. The staging is useless for a copy; it is
// here as the ceiling for transpose_2..4, which move exactly the same traffic through the same
// tile and barrier and only read it back transposed. Compared with one element per thread,
// each thread has TILE/STRIDE independent loads in flight, which helps hide DRAM latency.
//
// Edges: the grid is ceil(N/TILE) x ceil(M/TILE) blocks. Loads and stores outside M x N are
// skipped (guarded per element); the barrier is outside every guard, so all threads reach it.
// Offsets are computed in size_t, so M*N may exceed 2^31.

#ifndef TILE
#define TILE 32    // tile edge in elements; the block is TILE x STRIDE threads
#endif
#ifndef STRIDE
#define STRIDE 4   // rows of threads per block; each thread handles TILE/STRIDE rows
#endif

extern "C" __global__ void copy_2(const int M, const int N,
                                  const float* __restrict__ src, float* __restrict__ dst)
{
    __shared__ float tile[TILE][TILE];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int col = blockIdx.x * TILE + tx;
    const int row0 = blockIdx.y * TILE + ty;

    #pragma unroll
    for (int i = 0; i < TILE; i += STRIDE) {
        const int row = row0 + i;
        if (row < M && col < N)
            tile[ty + i][tx] = src[(size_t)row * N + col];
    }
    __syncthreads();
    #pragma unroll
    for (int i = 0; i < TILE; i += STRIDE) {
        const int row = row0 + i;
        if (row < M && col < N)
            dst[(size_t)row * N + col] = tile[ty + i][tx];
    }
}
