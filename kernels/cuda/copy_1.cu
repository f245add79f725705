// copy_1: plain copy of an MxN row-major matrix, one element per thread.
// Reads and writes are both coalesced along threadIdx.x (the columns): this is the bandwidth
// the transposes are measured against, next to the device's own copy.
// Edges: threads outside the matrix do nothing, so any M x N works.

#ifndef TILE
#define TILE 32  // block is TILE x TILE threads (the kernel itself does not use it)
#endif

extern "C" __global__ void copy_1(const int M, const int N, const float* __restrict__ src,
                                  float* __restrict__ dst) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) dst[row * N + col] = src[row * N + col];
}
