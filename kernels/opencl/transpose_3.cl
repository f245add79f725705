// transpose_3: transpose_2 with the local tile padded by one column, tile[TILE][TILE+1].
//
// Change over transpose_2: one unused column per tile row. Reading a column, tile[tx][ty+i],
// now steps TILE+1 words between lanes instead of TILE, so with 32 banks of 4 bytes the 32
// lanes of a warp (TILE=32: one row of work-items) fall in 32 different banks; for any even
// TILE the stride is odd, which removes the conflicts the same way. The row-wise stores into the
// tile stay conflict-free.
// Why faster: the 32-way bank conflict of transpose_2 serialised every write-side local read
// into 32 transactions; now it is one. Cost: TILE more floats of local memory per group.
//
// Edges: as transpose_2. The grid is ceil(N/TILE) x ceil(M/TILE) groups; each element load is
// skipped outside src (M x N) and each store outside dst (N x M); the barrier is outside every
// guard. Offsets are computed in size_t, so M*N may exceed 2^31.

#ifndef TILE
#define TILE 32    // tile edge in elements; the work-group is TILE x STRIDE work-items
#endif
#ifndef STRIDE
#define STRIDE 4   // rows of work-items per group; each work-item handles TILE/STRIDE rows
#endif

__kernel void transpose_3(const int M, const int N,
                          const __global float* src, __global float* dst)
{
    __local float tile[TILE][TILE + 1];      // +1: column reads hit distinct banks
    const int tx = get_local_id(0);
    const int ty = get_local_id(1);
    const int bx = get_group_id(0) * TILE;   // first src column of this tile (= first dst row)
    const int by = get_group_id(1) * TILE;   // first src row of this tile (= first dst column)

    #pragma unroll
    for (int i = 0; i < TILE; i += STRIDE) {
        const int row = by + ty + i, col = bx + tx;
        if (row < M && col < N)
            tile[ty + i][tx] = src[(size_t)row * N + col];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    #pragma unroll
    for (int i = 0; i < TILE; i += STRIDE) {
        const int row = bx + ty + i, col = by + tx;
        if (row < N && col < M)
            dst[(size_t)row * M + col] = tile[tx][ty + i];
    }
}
