// transpose_1: naive transpose, dst (NxM) = transpose of src (MxN), row-major.
// Reads walk along a row of src and are coalesced; the writes of neighbouring threads land
// M floats apart in dst, so each one is its own memory transaction.
// Edges: threads outside the matrix do nothing, so any M x N works.

#ifndef TILE
#define TILE 32  // block is TILE x TILE threads (the kernel itself does not use it)
#endif

extern "C" __global__ void transpose_1(const int M, const int N, const float* __restrict__ src,
                                       float* __restrict__ dst) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) dst[col * M + row] = src[row * N + col];
}
