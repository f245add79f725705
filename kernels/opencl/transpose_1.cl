// transpose_1: naive transpose, dst (NxM) = transpose of src (MxN), row-major.
// Reads walk along a row of src and are coalesced; the writes of neighbouring work-items land
// M floats apart in dst, so each one is its own memory transaction.
// Edges: work-items outside the matrix do nothing, so any M x N works.

#ifndef TILE
#define TILE 32  // work-group is TILE x TILE work-items (the kernel itself does not use it)
#endif

__kernel void transpose_1(const int M, const int N, const __global float* src,
                          __global float* dst) {
    const int col = get_global_id(0);
    const int row = get_global_id(1);
    if (row < M && col < N) dst[col * M + row] = src[row * N + col];
}
