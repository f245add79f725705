// copy_2: copy staged through local memory.
//
// Change over copy_1: each work-group copies a TILE x TILE tile with TILE x STRIDE work-items; a
// work-item loads TILE/STRIDE elements (rows ty, ty+STRIDE, ...) into a local tile, the group
// meets at a barrier, and the same elements go back out. The staging is useless for a copy; it is
// here as the ceiling for transpose_2..4, which move exactly the same traffic through the same
// tile and barrier and only read it back transposed. Compared with one element per work-item,
// each work-item has TILE/STRIDE independent loads in flight, which helps hide DRAM latency.
//
// Edges: the grid is ceil(N/TILE) x ceil(M/TILE) groups. Loads and stores outside M x N are
// skipped (guarded per element); the barrier is outside every guard, so all work-items reach it.
// Offsets are computed in size_t, so M*N may exceed 2^31.

#ifndef TILE
#define TILE 32    // tile edge in elements; the work-group is TILE x STRIDE work-items
#endif
#ifndef STRIDE
#define STRIDE 4   // rows of work-items per group; each work-item handles TILE/STRIDE rows
#endif

__kernel void copy_2(const int M, const int N,
                     const __global float* src, __global float* dst)
{
    __local float tile[TILE][TILE];
    const int tx = get_local_id(0);
    const int ty = get_local_id(1);
    const int col = get_group_id(0) * TILE + tx;
    const int row0 = get_group_id(1) * TILE + ty;

    #pragma unroll
    for (int i = 0; i < TILE; i += STRIDE) {
        const int row = row0 + i;
        if (row < M && col < N)
            tile[ty + i][tx] = src[(size_t)row * N + col];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    #pragma unroll
    for (int i = 0; i < TILE; i += STRIDE) {
        const int row = row0 + i;
        if (row < M && col < N)
            dst[(size_t)row * N + col] = tile[ty + i][tx];
    }
}
