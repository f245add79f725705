// transpose_2: transpose through a local-memory tile; coalesced reads AND coalesced writes.
//
// Change over transpose_1: a block (TILE x STRIDE threads, TILE/STRIDE rows each) reads a
// TILE x TILE tile of src row by row (consecutive threads read consecutive addresses), waits at
// a barrier, then writes the transposed tile to dst row by row, reading the tile column-wise from
// shared memory. Both global accesses are now coalesced; only shared memory sees the strided
// pattern. Why faster: the naive kernel's strided global side wastes most of every memory
// transaction; shared memory is on-chip and cheap to access out of order.
// Left for transpose_3: tile[tx][ty+i] walks a column of a TILE-wide array, so on a 32-bank
// memory with TILE=32 all 32 lanes of a warp hit the same bank (32-way bank conflict).
//
// Edges: the grid is ceil(N/TILE) x ceil(M/TILE) blocks. Each element load is skipped when its
// (row, col) is outside src (M x N) and each store when it is outside dst (N x M); the tile cells
// that stay unwritten are never stored. The barrier is outside every guard, so all threads
// reach it. Offsets are computed in size_t, so M*N may exceed 2^31.

#ifndef TILE
#define TILE 32    // tile edge in elements; the block is TILE x STRIDE threads
#endif
#ifndef STRIDE
#define STRIDE 4   // rows of threads per block; each thread handles TILE/STRIDE rows
#endif

extern "C" __global__ void transpose_2(const int M, const int N,
                                       const float* __restrict__ src, float* __restrict__ dst)
{
    __shared__ float tile[TILE][TILE];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int bx = blockIdx.x * TILE;       // first src column of this tile (= first dst row)
    const int by = blockIdx.y * TILE;       // first src row of this tile (= first dst column)

    // Read: src row by+ty+i, column bx+tx (consecutive tx -> consecutive addresses).
    #pragma unroll
    for (int i = 0; i < TILE; i += STRIDE) {
        const int row = by + ty + i, col = bx + tx;
        if (row < M && col < N)
            tile[ty + i][tx] = src[(size_t)row * N + col];
    }
    __syncthreads();
    // Write: dst row bx+ty+i (a src column), column by+tx (a src row), again consecutive in tx.
    #pragma unroll
    for (int i = 0; i < TILE; i += STRIDE) {
        const int row = bx + ty + i, col = by + tx;
        if (row < N && col < M)
            dst[(size_t)row * M + col] = tile[tx][ty + i];
    }
}
