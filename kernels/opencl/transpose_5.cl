// transpose_5: 16-byte loads and 16-byte stores, a 4x4 transpose in registers, and an
// XOR-swizzled float4 tile that keeps local memory free of bank conflicts.
//
// Change over transpose_3 (transpose_4's diagonal order is dropped: nothing to gain on GPUs that
// hash addresses across partitions): every global access is a float4. A work-group of
// (TILE/4) x STRIDE work-items owns a TILE x TILE tile (default 64 x 64, 128 work-items).
// Load phase: a work-item takes a 4x4 block of src: four float4 loads from four consecutive src
// rows at the same column (consecutive work-items take consecutive float4s of a row, so a warp
// reads whole 256-byte row segments). It issues all the loads of its TILE/(4*STRIDE) blocks
// before storing anything (8 float4 = 128 bytes in flight per work-item at the defaults),
// transposes each block in registers (the columns of the block become float4 rows of dst) and
// stores them as float4s into tile[r][q]: dst-tile row r, float4 column q.
// Store phase: after one barrier, work-item (tx, ty) reads tile rows ty, ty+STRIDE, ... at float4
// column tx and writes them with float4 stores, consecutive work-items writing consecutive
// float4s of a dst row.
// Swizzle: the float4 column is stored at q ^ ((r / 4) & SWZ). Without it the load phase's
// stores would walk a column of the tile (4*TILE floats between neighbouring work-items:
// all in the same banks); with it the 8 work-items that share one 128-byte local-memory
// transaction hit 8 different 16-byte bank groups in both phases. No padding is needed.
// Why faster: 4x fewer load/store instructions per byte (the same bytes with a quarter of the
// memory requests), more bytes in flight per work-item, and no local-memory conflicts, which is
// what a bandwidth-bound kernel needs to approach the device-to-device copy bandwidth.
//
// Edges: the grid is ceil(N/TILE) x ceil(M/TILE) groups.
// - Vector path, taken when M % 4 == 0, N % 4 == 0 and both buffers are 16-byte aligned (a
//   uniform branch on kernel arguments): a float4 of a src row or of a dst row is then either
//   wholly inside the matrix or wholly outside, and so are the 4 rows of a 4x4 block, so one
//   guard per block (load) or per float4 (store) skips everything outside; skipped blocks fill
//   the tile with zeros that are never stored.
// - Ragged path otherwise (rows that do not start 16-byte aligned). Accesses stay coalesced
//   (consecutive work-items, consecutive floats or float4s of a src row or a dst row), and the
//   stores are placed so that every warp writes whole 32-byte sectors. Measured on an H100
//   (8191x8193): a copy whose loads are unaligned runs at 0.99x the device copy, one whose
//   stores are unaligned at 0.71x, even when its rows are 16-byte aligned (0.81x): a warp
//   store that covers part of a sector costs the memory system a read of that sector.
//   So the dst columns this tile writes in dst row d are not [by, by + TILE) but
//   [by - s, by + TILE - s'), s = (dst + d*M + by) mod 8 in floats and s' the same at
//   by + TILE (equal when TILE % 8 == 0): every tile starts at a sector boundary and the tiles
//   of a row still partition it (the first starts at column 0, the last ends at M, at most
//   TILE + 7 columns). The tile therefore holds src rows by - 8 .. by + TILE - 1 (a halo of
//   8 rows, loaded only when some s > 0, that is unless M % 8 == 0, TILE % 8 == 0 and dst is
//   sector-aligned), as HT = TILE + 8 floats per src column in rows of RP = HT + 1 floats
//   (odd: a warp writing one src row, 32 consecutive columns, hits 32 distinct banks; a warp
//   reading a dst row reads consecutive floats; the interior's float4 moves below step 4
//   floats apart and so share banks a few ways).
//   Interior tiles (not on the right edge, not in the last tile row, src 16-byte aligned) move
//   float4s both ways: tile row rr is read as the Q + 1 aligned float4s that cover its TILE
//   floats from wherever the row starts (the components outside are dropped), and each dst
//   row's TILE columns, starting on a sector boundary, are written as Q aligned float4s
//   gathered from four consecutive tile floats. All loads of a work-item are issued before any
//   store. Tiles on an edge move element by element, guarding each.
//   Measured on an H100 against element by element everywhere (same run, x the device copy):
//   1000x1030 1.00 -> 1.04-1.09 (CUDA), 0.93-0.95 -> 0.97-0.99 (OpenCL); 8191x8193 0.92 -> 0.91
//   (CUDA), 0.91 -> 0.91 (OpenCL):
//   issue slots busy fell from 60% to 19% (Nsight Compute), but that shape is held by L2 and
//   DRAM traffic (83% and 79% busy, before and after), which the halo and the rows starting
//   off a sector set, not the instruction count.
//   (Earlier: element by element with dst columns [by, by + TILE): 0.73x at 8191x8193; before
//   that, the vector path's 4x4 blocks with a guard per element: 0.64x.)
//   The size rules build the ragged path with a register cap of 255 (conf/kernel/transpose_5.yaml):
//   it binds nothing, but the compiler then allocates 144 registers instead of 56, 3 groups
//   fit an SM instead of 9, and the same traffic from fewer tiles at once ran faster on an
//   H100 (8191x8193 0.91 -> 0.93x, both backends); the vector path was slower with it.
// The barrier is outside every guard and branch, so all work-items reach it. Offsets are
// computed in size_t, so M*N may exceed 2^31.

#ifndef TILE
#define TILE 64    // tile edge in elements (a power of two); the work-group is (TILE/4) x STRIDE
#endif
#ifndef STRIDE
#define STRIDE 8   // rows of work-items per group; each loads TILE/(4*STRIDE) 4x4 blocks
#endif
#define Q (TILE / 4)                 // float4s per tile row = work-items per group row
#define BLOCKS (Q / STRIDE)          // 4x4 blocks per work-item in the load phase
#define SWZ ((Q < 8 ? Q : 8) - 1)    // XOR mask on the float4 column: 8 x 16 B = 32 banks
#define T (Q * STRIDE)                // work-items per group
#define HT (TILE + 8)                 // src rows in the ragged path's tile: 8 of halo
#define RP (HT + 1)                   // its row pitch in floats (odd: no bank conflicts)
#define LOADS (HT * TILE / T)         // ragged path: loads per work-item (T divides 8 * TILE)
#define HALO_LOADS (8 * TILE / T)     // the first HALO_LOADS of them are the halo rows
#define EDGE_STORES (HT * TILE / T)   // ragged path: stores per work-item, edge tiles
#define SMEM_FLOATS (TILE * RP > TILE * TILE ? TILE * RP : TILE * TILE)
#define VROWS ((HT + STRIDE - 1) / STRIDE)  // ragged interior: tile rows per work-item
#define LAST_ROWS ((HT + T - 1) / T)  // ragged interior: rows whose last float4 a work-item reads
#define VSTORES (TILE / STRIDE)       // ragged interior: float4 stores per work-item


__kernel void transpose_5(const int M, const int N,
                          const __global float* src, __global float* dst)
{
    // Vector path: float4 tile[TILE][Q], [dst-tile row][swizzled float4 column].
    // Ragged path: float tile[TILE][RP], [src column][src row - (by - 8)].
    __local float4 tile[SMEM_FLOATS / 4];  // float4s, for the alignment the vector path needs
    __local float* smem = (__local float*)tile;
    const int tx = get_local_id(0);          // float4 column: 0 .. Q-1
    const int ty = get_local_id(1);          // 0 .. STRIDE-1
    const int bx = get_group_id(0) * TILE;   // first src column of this tile (= first dst row)
    const int by = get_group_id(1) * TILE;   // first src row of this tile (= first dst column)
    const int vec = ((M | N) & 3) == 0 && (((size_t)src | (size_t)dst) & 15) == 0;

    // Load phase: block b of this work-item covers src rows by + 4*(ty + b*STRIDE) + 0..3 and
    // src columns bx + 4*tx + 0..3. All loads are issued before any store.
    const int col = bx + 4 * tx;
    float4 a[BLOCKS][4];
    if (vec) {
        const __global float4* src4 = (const __global float4*)src;
        #pragma unroll
        for (int b = 0; b < BLOCKS; ++b) {
            const int row = by + 4 * (ty + b * STRIDE);
            if (row < M && col < N) {        // M, N multiples of 4: the whole block is inside
                const size_t i0 = ((size_t)row * N + col) >> 2;
                const size_t step = (size_t)(N >> 2);
                a[b][0] = src4[i0];
                a[b][1] = src4[i0 + step];
                a[b][2] = src4[i0 + 2 * step];
                a[b][3] = src4[i0 + 3 * step];
            } else {
                a[b][0] = a[b][1] = a[b][2] = a[b][3] = (float4)(0.0f);
            }
        }
    }
    const int lt = ty * Q + tx;              // this work-item's number in the group
    if (vec) {
        // Transpose each 4x4 block in registers; column k of the block is dst-tile row
        // 4*tx + k, float4 column (ty + b*STRIDE), swizzled with ((4*tx + k) / 4) & SWZ = tx & SWZ.
        #pragma unroll
        for (int b = 0; b < BLOCKS; ++b) {
            const int q = (ty + b * STRIDE) ^ (tx & SWZ);
            tile[(4 * tx + 0) * Q + q] = (float4)(a[b][0].x, a[b][1].x, a[b][2].x, a[b][3].x);
            tile[(4 * tx + 1) * Q + q] = (float4)(a[b][0].y, a[b][1].y, a[b][2].y, a[b][3].y);
            tile[(4 * tx + 2) * Q + q] = (float4)(a[b][0].z, a[b][1].z, a[b][2].z, a[b][3].z);
            tile[(4 * tx + 3) * Q + q] = (float4)(a[b][0].w, a[b][1].w, a[b][2].w, a[b][3].w);
        }
    } else {
        // Ragged path: tile row rr, column j (src row by - 8 + rr, column bx + j) lands at
        // smem[j * RP + rr].
        const int halo = ((int)(((size_t)dst >> 2) & 7) | (M & 7) | (TILE & 7)) != 0;  // some s > 0
        if (by >= 8 && by + TILE < M && bx + TILE <= N && ((size_t)src & 15) == 0) {
            // Interior tiles (not in the last tile row, so the up to 3 floats read past a
            // row's TILE stay inside src). Tile row rr (src row by - 8 + rr) starts at element
            // g = (by - 8 + rr) * N + bx, a = g % 4 floats past a 16-byte boundary; it is read
            // as the Q + 1 aligned float4s from g - a: work-item (ty, tx) reads float4 tx of
            // rows ty, ty + STRIDE, ... and the last float4 of rows lt, lt + T, ...
            // Component t of float4 q is tile column j = 4q + t - a, kept when 0 <= j < TILE.
            // A quarter of the load instructions of one float per work-item, each row
            // 16-byte coalesced.
            const __global float4* src4 = (const __global float4*)src;
            const size_t g0 = (size_t)(by - 8 + ty) * N + bx;
            const size_t g_step = (size_t)STRIDE * N;
            float4 w[VROWS];
            #pragma unroll
            for (int i = 0; i < VROWS; ++i) {
                const int rr = ty + i * STRIDE;
                if ((HT % STRIDE == 0 || rr < HT) && (rr >= 8 || halo))
                    w[i] = src4[((g0 + i * g_step) >> 2) + tx];
            }
            float4 w_last[LAST_ROWS];                       // the last float4 of row lt + k*T
            #pragma unroll
            for (int k = 0; k < LAST_ROWS; ++k) {
                const int rr = lt + k * T;
                const size_t g = (size_t)(by - 8 + rr) * N + bx;
                w_last[k] = (float4)(0.0f);
                if ((HT % T == 0 || rr < HT) && (g & 3) != 0 && (rr >= 8 || halo))
                    w_last[k] = src4[(g >> 2) + Q];
            }
            #pragma unroll
            for (int i = 0; i < VROWS; ++i) {
                const int rr = ty + i * STRIDE;
                if ((HT % STRIDE == 0 || rr < HT) && (rr >= 8 || halo)) {
                    const int j = 4 * tx - (int)((g0 + i * g_step) & 3);
                    const float c[4] = {w[i].x, w[i].y, w[i].z, w[i].w};
                    #pragma unroll
                    for (int t = 0; t < 4; ++t)
                        if (j + t >= 0)      // j + t <= 4*(Q-1) + 3 < TILE always
                            smem[(j + t) * RP + rr] = c[t];
                }
            }
            #pragma unroll
            for (int k = 0; k < LAST_ROWS; ++k) {
                const int rr = lt + k * T;
                const int j = TILE - (int)(((size_t)(by - 8 + rr) * N + bx) & 3);  // j..TILE-1
                const float c[4] = {w_last[k].x, w_last[k].y, w_last[k].z, w_last[k].w};
                #pragma unroll
                for (int t = 0; t < 3; ++t)
                    if ((HT % T == 0 || rr < HT) && j + t < TILE && (rr >= 8 || halo))
                        smem[(j + t) * RP + rr] = c[t];
            }
        } else {
            // Tiles on an edge (a few in a large matrix): element e = lt + i*T is src row
            // by - 8 + e / TILE, column bx + e % TILE, guarded, at smem[(e % TILE) * RP + e / TILE].
            // Each value goes to the tile as it comes: held in registers until all are loaded,
            // as the interior path does, these guarded loads took 72-128 registers (CUDA).
            #pragma unroll
            for (int i = 0; i < LOADS; ++i) {
                const int e = lt + i * T;
                const int row = by - 8 + e / TILE, col = bx + e % TILE;
                if (i >= HALO_LOADS || halo)
                    smem[(e % TILE) * RP + e / TILE] =
                        (row >= 0 && row < M && col < N) ? src[(size_t)row * N + col] : 0.0f;
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // Store phase: dst row bx + r (a src column), dst columns by + 4*tx + 0..3 (src rows).
    const int dcol = by + 4 * tx;
    if (vec) {
        __global float4* dst4 = (__global float4*)dst;
        #pragma unroll
        for (int i = 0; i < TILE; i += STRIDE) {
            const int r = ty + i;
            const float4 v = tile[r * Q + (tx ^ ((r >> 2) & SWZ))];
            const int drow = bx + r;
            if (drow < N && dcol < M)        // M, N multiples of 4: the whole float4 is inside
                dst4[((size_t)drow * M + dcol) >> 2] = v;
        }
    } else {
        // Ragged path: dst row d = bx + dl (src column), columns from by - s (a sector
        // boundary in dst), column by - s + j being tile row 8 - s + j (src row by - 8 + ...).
        const size_t dst_off = (size_t)dst >> 2;
        const int last = by + TILE >= M;      // this tile ends dst rows: up to TILE + 7 columns
        if (TILE % 8 == 0 && by > 0 && !last && bx + TILE <= N) {
            // Float4 u = f % Q of dst-tile row dl = f / Q: the row's TILE columns start on a
            // sector boundary, so every float4 is 16-byte aligned and a warp writes whole
            // sectors (Q consecutive float4s per row); its four floats are consecutive in the
            // tile's row dl. A quarter of the store instructions of one float per work-item.
            #pragma unroll
            for (int i = 0; i < VSTORES; ++i) {
                const int f = lt + i * T;
                const int dl = f / Q, j = 4 * (f % Q);
                const size_t rowstart = (size_t)(bx + dl) * M;
                const int s = (int)((dst_off + rowstart) & 7);  // by % 8 == 0
                const __local float* t = smem + dl * RP + 8 - s + j;
                *((__global float4*)(dst + rowstart + by - s + j)) = (float4)(t[0], t[1], t[2], t[3]);
            }
        } else {
            // Tiles first or last in their dst rows, or on the right edge of src: slots
            // j = e % HT, guarded: the first tile starts at column 0, the last ends at M.
            #pragma unroll
            for (int i = 0; i < EDGE_STORES; ++i) {
                const int e = lt + i * T;
                const int dl = e / HT, j = e % HT;
                const size_t rowstart = (size_t)(bx + dl) * M;
                const int s = (int)((dst_off + rowstart + by) & 7);
                const int c = by - s + j;                        // dst column
                const int end = last ? M : by + TILE - (int)((dst_off + rowstart + by + TILE) & 7);
                if (bx + dl < N && c >= 0 && c < end)
                    dst[rowstart + c] = smem[dl * RP + 8 - s + j];
            }
        }
    }
}
