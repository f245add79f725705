// matmul_4: wider data types (myGEMM step 4, adapted to row-major C = A*B).
// CUDA mirror of kernels/opencl/matmul_4.cl: the same algorithm, line for line.
//
// What changes over matmul_3: instead of WPT elements in one column, a thread computes WIDTH
// neighbouring elements of one C row, held in one vector (floatW below: WIDTH floats, aligned to
// WIDTH*4 bytes, so it moves as one float, float2 or float4 access, or two float4 for WIDTH 8).
// Global loads and stores, shared-memory stores and the shared reads of the inner loop move whole
// vectors: the A tile as WIDTH neighbouring k, the B tile and C as WIDTH neighbouring n.
// A block is TS/WIDTH x TS threads and still computes a TS x TS tile of C.
//
// Why it is faster: one wide access replaces WIDTH scalar ones, so the load/store instructions
// per multiply-add drop by about WIDTH (fewer instructions to issue, fewer address
// calculations, full 16-byte transactions). In the inner loop one vector of Asub supplies WIDTH
// values of k, and each Bsub vector feeds WIDTH multiply-adds. Asub rows are padded by one
// vector so that the few rows a warp reads at once fall in different banks.
//
// Edges (any M, N, K >= 1): the wide path needs the vectors aligned, so it is taken per operand
// when the row length allows it (A: K % WIDTH == 0; B and C: N % WIDTH == 0). Those conditions
// are the same for every thread, so the branch is uniform. Then a vector lies wholly inside
// or wholly outside the matrix and one bounds check covers it. Otherwise the same vector is
// assembled from WIDTH bounds-checked scalar accesses. Out-of-range tile elements are zeros in
// shared memory; only in-range elements of C are stored. Every thread runs every tile
// iteration, so all reach every barrier. Buffers must start at a WIDTH*4-byte aligned address
// (true for any cudaMalloc/CuPy allocation, aligned to at least 256 bytes).

#ifndef TS
#define TS 64          // tile size in M, N and K: a block computes a TS x TS tile of C
#endif
#ifndef WIDTH
#define WIDTH 8        // floats per vector: 1, 2, 4 or 8 neighbouring elements per access
#endif
#define TSW (TS / WIDTH)  // vectors per tile row: threads along N in a block

#if WIDTH != 1 && WIDTH != 2 && WIDTH != 4 && WIDTH != 8
#error "WIDTH must be 1, 2, 4 or 8"
#endif

// The vector type: the alignment makes the compiler move it with vector instructions
// (ld.v2 / ld.v4, and two ld.v4 for 8 floats); lanes are indexed with unrolled constants.
struct __align__(4 * WIDTH) floatW {
    float lane[WIDTH];
};

__device__ __forceinline__ floatW zero_w()
{
    floatW v;
    #pragma unroll
    for (int w = 0; w < WIDTH; w++) {
        v.lane[w] = 0.0f;
    }
    return v;
}

extern "C" __global__ void matmul_4(const int M, const int N, const int K,
                                    const float* __restrict__ A, const float* __restrict__ B,
                                    float* __restrict__ C)
{
    const int local_vec = threadIdx.x;                    // 0 .. TSW-1: which vector of the row
    const int local_row = threadIdx.y;                    // 0 .. TS-1, along M
    const int row = blockIdx.y * TS + local_row;          // the C row this thread computes
    const int col0 = blockIdx.x * TS + local_vec * WIDTH; // its first C column

    // Uniform over the whole launch: may the vectors of a row be accessed as aligned vectors?
    const bool a_wide = (K % WIDTH) == 0;
    const bool bc_wide = (N % WIDTH) == 0;
    const int K_vecs = K / WIDTH;   // row length in vectors, used only on the wide paths
    const int N_vecs = N / WIDTH;
    const floatW* __restrict__ A_vec = reinterpret_cast<const floatW*>(A);
    const floatW* __restrict__ B_vec = reinterpret_cast<const floatW*>(B);
    floatW* __restrict__ C_vec = reinterpret_cast<floatW*>(C);

    __shared__ floatW Asub[TS][TSW + 1];  // Asub[m][k/WIDTH], padded by a vector (bank conflicts)
    __shared__ floatW Bsub[TS][TSW];      // Bsub[k][n/WIDTH]

    floatW acc = zero_w();

    const int num_tiles = (K + TS - 1) / TS;
    for (int t = 0; t < num_tiles; t++) {
        const int tile_k0 = t * TS;

        // A tile: this thread loads the vector at row `row`, columns a_col .. a_col+WIDTH-1.
        const int a_col = tile_k0 + local_vec * WIDTH;
        floatW a_vec;
        if (a_wide) {
            a_vec = zero_w();
            if (row < M && a_col < K) {
                a_vec = A_vec[row * K_vecs + t * TSW + local_vec];
            }
        } else {
            #pragma unroll
            for (int w = 0; w < WIDTH; w++) {
                a_vec.lane[w] = (row < M && a_col + w < K) ? A[row * K + a_col + w] : 0.0f;
            }
        }
        Asub[local_row][local_vec] = a_vec;

        // B tile: this thread loads the vector at row b_row, columns col0 .. col0+WIDTH-1.
        const int b_row = tile_k0 + local_row;
        floatW b_vec;
        if (bc_wide) {
            b_vec = zero_w();
            if (b_row < K && col0 < N) {
                b_vec = B_vec[b_row * N_vecs + blockIdx.x * TSW + local_vec];
            }
        } else {
            #pragma unroll
            for (int w = 0; w < WIDTH; w++) {
                b_vec.lane[w] = (b_row < K && col0 + w < N) ? B[b_row * N + col0 + w] : 0.0f;
            }
        }
        Bsub[local_row][local_vec] = b_vec;

        __syncthreads();

        #pragma unroll
        for (int kv = 0; kv < TSW; kv++) {
            const floatW a_lanes = Asub[local_row][kv];   // WIDTH consecutive k of this row of A
            #pragma unroll
            for (int w = 0; w < WIDTH; w++) {
                const floatW b = Bsub[kv * WIDTH + w][local_vec];
                #pragma unroll
                for (int c = 0; c < WIDTH; c++) {
                    acc.lane[c] += a_lanes.lane[w] * b.lane[c];
                }
            }
        }
        __syncthreads();   // the tile is consumed before the next one overwrites it
    }

    if (bc_wide) {
        if (row < M && col0 < N) {
            C_vec[row * N_vecs + blockIdx.x * TSW + local_vec] = acc;
        }
    } else {
        #pragma unroll
        for (int w = 0; w < WIDTH; w++) {
            if (row < M && col0 + w < N) {
                C[row * N + col0 + w] = acc.lane[w];
            }
        }
    }
}
