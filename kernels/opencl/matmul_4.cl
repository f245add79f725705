// matmul_4: wider data types (myGEMM step 4, adapted to row-major C = A*B).
//
// What changes over matmul_3: instead of WPT elements in one column, a work-item computes WIDTH
// neighbouring elements of one C row, held in one vector (float, float2, float4 or float8).
// Global loads and stores, local-memory stores and the local reads of the inner loop move whole
// vectors: the A tile as WIDTH neighbouring k, the B tile and C as WIDTH neighbouring n.
// A work-group is TS/WIDTH x TS work-items and still computes a TS x TS tile of C.
//
// Why it is faster: one wide access replaces WIDTH scalar ones, so the load/store instructions
// per multiply-add drop by about WIDTH (fewer instructions to issue, fewer address
// calculations, full 16-byte transactions). In the inner loop one vector of Asub supplies WIDTH
// values of k, and each Bsub vector feeds WIDTH multiply-adds. Asub rows are padded by one
// vector so that the few rows a warp reads at once fall in different banks.
//
// Edges (any M, N, K >= 1): the wide path needs the vectors aligned, so it is taken per operand
// when the row length allows it (A: K % WIDTH == 0; B and C: N % WIDTH == 0). Those conditions
// are the same for every work-item, so the branch is uniform. Then a vector lies wholly inside
// or wholly outside the matrix and one bounds check covers it. Otherwise the same vector is
// assembled from WIDTH bounds-checked scalar accesses. Out-of-range tile elements are zeros in
// local memory; only in-range elements of C are stored. Every work-item runs every tile
// iteration, so all reach every barrier. Buffers must start at a WIDTH*4-byte aligned address
// (true for any OpenCL buffer, whose base is aligned to at least 128 bytes).

#ifndef TS
#define TS 64          // tile size in M, N and K: a work-group computes a TS x TS tile of C
#endif
#ifndef WIDTH
#define WIDTH 8        // floats per vector: 1, 2, 4 or 8 neighbouring elements per access
#endif
#define TSW (TS / WIDTH)  // vectors per tile row: work-items along N in a work-group

// floatW is the vector type; VSTORE_TO_ARRAY / VLOAD_FROM_ARRAY move it to and from a private
// float array, which is how single lanes are read or written with a compile-time lane index.
#if WIDTH == 1
    typedef float floatW;
    #define VSTORE_TO_ARRAY(v, p) ((p)[0] = (v))
    #define VLOAD_FROM_ARRAY(p) ((p)[0])
#elif WIDTH == 2
    typedef float2 floatW;
    #define VSTORE_TO_ARRAY(v, p) vstore2((v), 0, (p))
    #define VLOAD_FROM_ARRAY(p) vload2(0, (p))
#elif WIDTH == 4
    typedef float4 floatW;
    #define VSTORE_TO_ARRAY(v, p) vstore4((v), 0, (p))
    #define VLOAD_FROM_ARRAY(p) vload4(0, (p))
#elif WIDTH == 8
    typedef float8 floatW;
    #define VSTORE_TO_ARRAY(v, p) vstore8((v), 0, (p))
    #define VLOAD_FROM_ARRAY(p) vload8(0, (p))
#else
    #error "WIDTH must be 1, 2, 4 or 8"
#endif

__kernel void matmul_4(const int M, const int N, const int K,
                       const __global float* A, const __global float* B, __global float* C)
{
    const int local_vec = get_local_id(0);                // 0 .. TSW-1: which vector of the row
    const int local_row = get_local_id(1);                // 0 .. TS-1, along M
    const int row = get_group_id(1) * TS + local_row;     // the C row this work-item computes
    const int col0 = get_group_id(0) * TS + local_vec * WIDTH;  // its first C column

    // Uniform over the whole launch: may the vectors of a row be accessed as aligned vectors?
    const bool a_wide = (K % WIDTH) == 0;
    const bool bc_wide = (N % WIDTH) == 0;
    const int K_vecs = K / WIDTH;   // row length in vectors, used only on the wide paths
    const int N_vecs = N / WIDTH;
    const __global floatW* A_vec = (const __global floatW*)A;
    const __global floatW* B_vec = (const __global floatW*)B;
    __global floatW* C_vec = (__global floatW*)C;

    __local floatW Asub[TS][TSW + 1];  // Asub[m][k/WIDTH], padded by a vector (bank conflicts)
    __local floatW Bsub[TS][TSW];      // Bsub[k][n/WIDTH]

    floatW acc = (floatW)(0.0f);

    const int num_tiles = (K + TS - 1) / TS;
    for (int t = 0; t < num_tiles; t++) {
        const int tile_k0 = t * TS;

        // A tile: this work-item loads the vector at row `row`, columns a_col .. a_col+WIDTH-1.
        const int a_col = tile_k0 + local_vec * WIDTH;
        floatW a_vec;
        if (a_wide) {
            a_vec = (floatW)(0.0f);
            if (row < M && a_col < K) {
                a_vec = A_vec[row * K_vecs + t * TSW + local_vec];
            }
        } else {
            float lanes[WIDTH];
            #pragma unroll
            for (int w = 0; w < WIDTH; w++) {
                lanes[w] = (row < M && a_col + w < K) ? A[row * K + a_col + w] : 0.0f;
            }
            a_vec = VLOAD_FROM_ARRAY(lanes);
        }
        Asub[local_row][local_vec] = a_vec;

        // B tile: this work-item loads the vector at row b_row, columns col0 .. col0+WIDTH-1.
        const int b_row = tile_k0 + local_row;
        floatW b_vec;
        if (bc_wide) {
            b_vec = (floatW)(0.0f);
            if (b_row < K && col0 < N) {
                b_vec = B_vec[b_row * N_vecs + get_group_id(0) * TSW + local_vec];
            }
        } else {
            float lanes[WIDTH];
            #pragma unroll
            for (int w = 0; w < WIDTH; w++) {
                lanes[w] = (b_row < K && col0 + w < N) ? B[b_row * N + col0 + w] : 0.0f;
            }
            b_vec = VLOAD_FROM_ARRAY(lanes);
        }
        Bsub[local_row][local_vec] = b_vec;

        barrier(CLK_LOCAL_MEM_FENCE);

        #pragma unroll
        for (int kv = 0; kv < TSW; kv++) {
            float a_lanes[WIDTH];                        // WIDTH consecutive k of this row of A
            VSTORE_TO_ARRAY(Asub[local_row][kv], a_lanes);
            #pragma unroll
            for (int w = 0; w < WIDTH; w++) {
                acc += a_lanes[w] * Bsub[kv * WIDTH + w][local_vec];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);   // the tile is consumed before the next one overwrites it
    }

    if (bc_wide) {
        if (row < M && col0 < N) {
            C_vec[row * N_vecs + get_group_id(0) * TSW + local_vec] = acc;
        }
    } else {
        float lanes[WIDTH];
        VSTORE_TO_ARRAY(acc, lanes);
        #pragma unroll
        for (int w = 0; w < WIDTH; w++) {
            if (row < M && col0 + w < N) {
                C[row * N + col0 + w] = lanes[w];
            }
        }
    }
}
