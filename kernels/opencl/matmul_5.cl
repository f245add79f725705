// matmul_5: transposed input and rectangular tiles (myGEMM step 5, adapted to row-major C = A*B).
//
// What changes over matmul_3/4:
//  - A pre-pass (transpose_pre, below, launched first) writes AT = A^T, a K x M row-major
//    scratch buffer. myGEMM (column-major) transposes B; in row-major the operand whose rows run
//    along K instead of along a dimension of C is A, so A is the one transposed here.
//  - Tiles are rectangular: a work-group computes a TSM x TSN tile of C and steps through K in
//    slices of TSK, so the tile shape and the depth of the local tiles are tuned separately.
//  - A work-group is TSN x RTSM work-items (RTSM = TSM/WPTM); each work-item computes WPTM
//    elements of one C column, in WPTM consecutive rows.
//  - Loading is decoupled from computing: the work-group's work-items are numbered 0..THREADS-1
//    and load the tiles in that order, LPTA (LPTB) elements each.
//
// Why the transpose: after it, both tiles are TSK rows of TSM (TSN) floats that are contiguous in
// global memory, loaded by the same code in runs as long as the tile is wide, and stored
// k-major in local memory (Asub[k][m], Bsub[k][n]) as straight copies: consecutive work-items
// write consecutive words, with no bank conflicts. Without it, an A tile is TSM runs of only
// TSK floats, and getting it k-major would be a transposing store into local memory, which
// conflicts on banks (or needs padding). With k-major tiles, the inner loop reads Bsub[k][col]
// (consecutive work-items, consecutive words) and Asub[k][m0 .. m0+WPTM-1], the same
// WPTM contiguous words for every work-item of a warp: one broadcast, which the compiler can
// fetch as wide local loads because the words are contiguous. Larger rectangular tiles also
// cut global (L2) traffic per flop. The pre-pass costs one read and one write of A (about 1% of
// the run time at 4096), and both launches are timed together.
//
// Edges (any M, N, K >= 1): the pre-pass guards its reads and writes; the matmul grid is rounded
// up to whole tiles, tile loads outside AT or B write zeros into local memory, and only
// in-range elements of C are stored. Every work-item runs every tile iteration, so all reach
// every barrier.

#ifndef TSM
#define TSM 64         // tile size in M: rows of C per work-group
#endif
#ifndef TSN
#define TSN 64         // tile size in N: columns of C per work-group (= work-items along N)
#endif
#ifndef TSK
#define TSK 32         // tile size in K: depth of the A and B tiles in local memory
#endif
#ifndef WPTM
#define WPTM 16        // work per thread in M: consecutive C rows per work-item
#endif
#ifndef TRANS_TS
#define TRANS_TS 32    // tile size of the transpose pre-pass (TRANS_TS x TRANS_TS work-items)
#endif
#define RTSM (TSM / WPTM)                  // reduced tile size: work-items along M
#define THREADS (TSN * RTSM)               // work-items per work-group
#define LPTA ((TSK * TSM) / THREADS)       // loads per thread for the A tile
#define LPTB ((TSK * TSN) / THREADS)       // loads per thread for the B tile

// Pre-pass: dst (cols x rows) = src^T for a row-major rows x cols src. Called with
// (M, K, A, AT). A TRANS_TS x TRANS_TS tile goes through local memory so that both the read and
// the write are coalesced; the +1 padding puts a tile column in distinct banks.
__kernel void transpose_pre(const int rows, const int cols,
                            const __global float* src, __global float* dst)
{
    __local float tile[TRANS_TS][TRANS_TS + 1];
    const int tx = get_local_id(0);
    const int ty = get_local_id(1);
    const int src_col = get_group_id(0) * TRANS_TS + tx;
    const int src_row = get_group_id(1) * TRANS_TS + ty;
    tile[ty][tx] = (src_row < rows && src_col < cols) ? src[src_row * cols + src_col] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int dst_row = get_group_id(0) * TRANS_TS + ty;   // a column of src
    const int dst_col = get_group_id(1) * TRANS_TS + tx;   // a row of src
    if (dst_row < cols && dst_col < rows) {
        dst[dst_row * rows + dst_col] = tile[tx][ty];
    }
}

__kernel void matmul_5(const int M, const int N, const int K,
                       const __global float* AT, const __global float* B, __global float* C)
{
    const int local_col = get_local_id(0);              // 0 .. TSN-1, along N
    const int local_row = get_local_id(1);              // 0 .. RTSM-1, along M
    const int tid = local_row * TSN + local_col;        // 0 .. THREADS-1, for the tile loads
    const int tile_row0 = get_group_id(1) * TSM;        // first row of this work-group's C tile
    const int tile_col0 = get_group_id(0) * TSN;        // first column of this work-group's C tile
    const int col = tile_col0 + local_col;              // the C column this work-item computes
    const int row_in_tile0 = local_row * WPTM;          // its first row inside the tile

    // Asub[k][m]: a TSK x TSM tile of AT. Aligned to 16 bytes so that a work-item's WPTM
    // contiguous words can be read as float4s (the compiler only fuses reads it can prove aligned).
    __local float Asub[TSK][TSM] __attribute__((aligned(16)));
    __local float Bsub[TSK][TSN];   // Bsub[k][n]: a TSK x TSN tile of B

    float acc[WPTM];
    #pragma unroll
    for (int w = 0; w < WPTM; w++) {
        acc[w] = 0.0f;
    }

    const int num_tiles = (K + TSK - 1) / TSK;
    for (int t = 0; t < num_tiles; t++) {
        const int tile_k0 = t * TSK;

        // Both tiles are TSK rows of contiguous floats; work-item tid loads elements
        // tid, tid + THREADS, ... in row-major order, so a warp reads consecutive addresses.
        #pragma unroll
        for (int l = 0; l < LPTA; l++) {
            const int idx = tid + l * THREADS;
            const int k = idx / TSM;
            const int m = idx % TSM;
            const int a_row = tile_k0 + k;              // row of AT = column of A
            const int a_col = tile_row0 + m;            // column of AT = row of A
            Asub[k][m] = (a_row < K && a_col < M) ? AT[a_row * M + a_col] : 0.0f;
        }
        #pragma unroll
        for (int l = 0; l < LPTB; l++) {
            const int idx = tid + l * THREADS;
            const int k = idx / TSN;
            const int n = idx % TSN;
            const int b_row = tile_k0 + k;
            const int b_col = tile_col0 + n;
            Bsub[k][n] = (b_row < K && b_col < N) ? B[b_row * N + b_col] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        #pragma unroll
        for (int k = 0; k < TSK; k++) {
            const float b = Bsub[k][local_col];          // one read, reused WPTM times
            #pragma unroll
            for (int w = 0; w < WPTM; w++) {
                acc[w] += Asub[k][row_in_tile0 + w] * b;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);   // the tiles are consumed before the next ones land
    }

    #pragma unroll
    for (int w = 0; w < WPTM; w++) {
        const int row = tile_row0 + row_in_tile0 + w;
        if (row < M && col < N) {
            C[row * N + col] = acc[w];
        }
    }
}
