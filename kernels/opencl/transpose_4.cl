// transpose_4: transpose_3 with diagonal block ordering against partition camping.
//
// Change over transpose_3: the group ids are remapped before use. With the plain ordering the
// groups that run at the same time share a tile row of src and so write one tile *column* of
// dst: rows of dst that lie a fixed stride apart, which on older GPUs (e.g. GT200, 256-byte
// partitions interleaved by address) all landed in the same few memory partitions ("partition
// camping"). Diagonal ordering hands consecutive linear group ids to tiles along a wrapped
// diagonal, so concurrently running groups read different src tile rows and write different dst
// tile rows, spreading the traffic across partitions.
// General mapping, valid for any grid gx x gy (square or not): take the linear id
// bid = x + gx*y; then tile row = bid % gy and tile column = (bid / gy + tile row) % gx. Both
// steps are bijections, so every tile is still done exactly once. For a square grid this is the
// classic (x, y) -> ((x + y) % gx, x).
// Expectation: newer GPUs hash addresses across partitions, so this is likely to give nothing
// (the seed measured nothing on a V100); it is kept as a step to measure, and the remap costs
// two integer divisions per group.
//
// Edges: as transpose_3. The grid is ceil(N/TILE) x ceil(M/TILE) groups; the remap permutes
// the same set of tiles; each element load is skipped outside src (M x N) and each store
// outside dst (N x M); the barrier is outside every guard. Offsets are computed in size_t.

#ifndef TILE
#define TILE 32    // tile edge in elements; the work-group is TILE x STRIDE work-items
#endif
#ifndef STRIDE
#define STRIDE 4   // rows of work-items per group; each work-item handles TILE/STRIDE rows
#endif

__kernel void transpose_4(const int M, const int N,
                          const __global float* src, __global float* dst)
{
    __local float tile[TILE][TILE + 1];
    const int tx = get_local_id(0);
    const int ty = get_local_id(1);

    // Diagonal reordering of the groups (see header).
    const int gx = get_num_groups(0), gy = get_num_groups(1);
    const int bid = get_group_id(0) + gx * get_group_id(1);
    const int tile_y = bid % gy;
    const int tile_x = (bid / gy + tile_y) % gx;
    const int bx = tile_x * TILE;            // first src column of this tile (= first dst row)
    const int by = tile_y * TILE;            // first src row of this tile (= first dst column)

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
