// matmul_4: wider data types (myGEMM step 4, adapted to row-major C = A*B), on top of matmul_3.
//
// What changes over matmul_3: the work per work-item and the TS x TS tiles in local memory stay,
// but each of the WPT elements a work-item computes (WPT rows of C, RTS = TS/WPT apart) becomes
// a vector of WIDTH neighbouring columns, so a work-item computes WPT x WIDTH elements of C and a
// work-group is TS/WIDTH x TS/WPT work-items. Every global load (A and B), local store, local
// read of B and C store moves WIDTH floats at once (float, float2, float4 or float8); the A tile
// is stored and read as vectors of WIDTH neighbouring k.
//
// Why it is faster: with a WPT x WIDTH block of C per work-item, each B vector read from local
// memory feeds WPT x WIDTH multiply-adds and each A vector WIDTH x WIDTH, so local reads per
// multiply-add drop from about 1 + 1/WPT in matmul_3 to (1/WPT + 1/WIDTH) / WIDTH (at WPT 8,
// WIDTH 4: 12 wide reads per 128 multiply-adds). Wide global loads and stores need WIDTH times
// fewer instructions and address calculations, and the accumulators stay in registers.
// Local memory: A reads are broadcasts (all work-items of a row read the same vector), and A
// rows are padded by one vector so that the rows of a warp that differ land in different banks;
// B reads and all stores are consecutive vectors for consecutive work-items (conflict-free).
//
// Edges (any M, N, K >= 1): the grid is rounded up to whole TS x TS tiles. The wide path needs
// aligned vectors, so it is taken per operand when the row length allows it (A: K % WIDTH == 0;
// B and C: N % WIDTH == 0), a condition the same for every work-item (a uniform branch). Then a
// vector lies wholly inside or wholly outside the matrix and one bounds check covers it;
// otherwise the same vector is assembled from WIDTH bounds-checked scalar accesses. Out-of-range
// tile elements are zeros in local memory (they add nothing), only in-range elements of C are
// stored, and every work-item runs every tile iteration, so all reach every barrier. Buffers must
// start WIDTH*4-byte aligned (any OpenCL buffer is aligned to at least 128 bytes).

#ifndef TS
#define TS 64          // tile size in M, N and K: a work-group computes a TS x TS tile of C
#endif
#ifndef WPT
#define WPT 8          // work per thread: C rows per work-item, RTS rows apart
#endif
#ifndef WIDTH
#define WIDTH 4        // floats per vector: each of those rows is WIDTH neighbouring columns
#endif
#define RTS (TS / WPT)    // reduced tile size: work-items along M in a work-group
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
    const int local_vec = get_local_id(0);                // 0 .. TSW-1: which vector of a row
    const int local_row = get_local_id(1);                // 0 .. RTS-1, along M
    const int tile_row0 = get_group_id(1) * TS;           // first row of this work-group's C tile
    const int col0 = get_group_id(0) * TS + local_vec * WIDTH;  // first of this work-item's columns

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

    floatW acc[WPT];
    #pragma unroll
    for (int w = 0; w < WPT; w++) {
        acc[w] = (floatW)(0.0f);
    }

    const int num_tiles = (K + TS - 1) / TS;
    for (int t = 0; t < num_tiles; t++) {
        const int tile_k0 = t * TS;
        const int a_col = tile_k0 + local_vec * WIDTH;   // first k of this work-item's A vectors

        // Each work-item loads WPT vectors of each tile, RTS rows apart; consecutive
        // work-items read consecutive vectors of one row (coalesced).
        #pragma unroll
        for (int w = 0; w < WPT; w++) {
            const int r = local_row + w * RTS;           // row inside the tile

            const int a_row = tile_row0 + r;
            floatW a_vec = (floatW)(0.0f);
            if (a_wide) {
                if (a_row < M && a_col < K) {
                    a_vec = A_vec[a_row * K_vecs + t * TSW + local_vec];
                }
            } else {
                float lanes[WIDTH];
                #pragma unroll
                for (int v = 0; v < WIDTH; v++) {
                    lanes[v] = (a_row < M && a_col + v < K) ? A[a_row * K + a_col + v] : 0.0f;
                }
                a_vec = VLOAD_FROM_ARRAY(lanes);
            }
            Asub[r][local_vec] = a_vec;

            const int b_row = tile_k0 + r;
            floatW b_vec = (floatW)(0.0f);
            if (bc_wide) {
                if (b_row < K && col0 < N) {
                    b_vec = B_vec[b_row * N_vecs + get_group_id(0) * TSW + local_vec];
                }
            } else {
                float lanes[WIDTH];
                #pragma unroll
                for (int v = 0; v < WIDTH; v++) {
                    lanes[v] = (b_row < K && col0 + v < N) ? B[b_row * N + col0 + v] : 0.0f;
                }
                b_vec = VLOAD_FROM_ARRAY(lanes);
            }
            Bsub[r][local_vec] = b_vec;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        #pragma unroll
        for (int kv = 0; kv < TSW; kv++) {
            float a_lanes[WPT][WIDTH];                   // WIDTH consecutive k of each of my rows
            #pragma unroll
            for (int w = 0; w < WPT; w++) {
                VSTORE_TO_ARRAY(Asub[local_row + w * RTS][kv], a_lanes[w]);
            }
            #pragma unroll
            for (int v = 0; v < WIDTH; v++) {
                const floatW b = Bsub[kv * WIDTH + v][local_vec];   // one read, reused WPT times
                #pragma unroll
                for (int w = 0; w < WPT; w++) {
                    acc[w] += a_lanes[w][v] * b;
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);   // the tile is consumed before the next one overwrites it
    }

    #pragma unroll
    for (int w = 0; w < WPT; w++) {
        const int row = tile_row0 + local_row + w * RTS;
        if (bc_wide) {
            if (row < M && col0 < N) {
                C_vec[row * N_vecs + get_group_id(0) * TSW + local_vec] = acc[w];
            }
        } else {
            float lanes[WIDTH];
            VSTORE_TO_ARRAY(acc[w], lanes);
            #pragma unroll
            for (int v = 0; v < WIDTH; v++) {
                if (row < M && col0 + v < N) {
                    C[row * N + col0 + v] = lanes[v];
                }
            }
        }
    }
}
