// copy_1: plain copy of an MxN row-major matrix, one element per work-item.
// Reads and writes are both coalesced along dimension 0 (the columns): this is the bandwidth
// the transposes are measured against, next to the device's own copy.
// Edges: work-items outside the matrix do nothing, so any M x N works.

#ifndef TILE
#define TILE 32  // work-group is TILE x TILE work-items (the kernel itself does not use it)
#endif

__kernel void copy_1(const int M, const int N, const __global float* src, __global float* dst) {
    const int col = get_global_id(0);
    const int row = get_global_id(1);
    if (row < M && col < N) dst[row * N + col] = src[row * N + col];
}
