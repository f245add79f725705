// matmul_4: wider data types (myGEMM step 4, adapted to row-major C = A*B), on top of matmul_3.
// CUDA mirror of kernels/opencl/matmul_4.cl: the same algorithm, line for line.
//
// What changes over matmul_3: the work per thread and the TS x TS tiles in shared memory stay,
// but each of the WPT elements a thread computes (WPT rows of C, RTS = TS/WPT apart) becomes a
// vector of WIDTH neighbouring columns, so a thread computes WPT x WIDTH elements of C and a
// block is TS/WIDTH x TS/WPT threads. Every global load (A and B), shared store, shared read of
// B and C store moves WIDTH floats at once (floatW below: WIDTH floats aligned to WIDTH*4 bytes,
// so one float, float2 or float4 access, or two float4 for WIDTH 8); the A tile is stored and
// read as vectors of WIDTH neighbouring k.
//
// Why it is faster: with a WPT x WIDTH block of C per thread, each B vector read from shared
// memory feeds WPT x WIDTH multiply-adds and each A vector WIDTH x WIDTH, so shared reads per
// multiply-add drop from about 1 + 1/WPT in matmul_3 to (1/WPT + 1/WIDTH) / WIDTH (at WPT 8,
// WIDTH 4: 12 wide reads per 128 multiply-adds). Wide global loads and stores need WIDTH times
// fewer instructions and address calculations, and the accumulators stay in registers.
// Shared memory: A reads are broadcasts (all threads of a row read the same vector), and A rows
// are padded by one vector so that the rows of a warp that differ land in different banks; B
// reads and all stores are consecutive vectors for consecutive threads (conflict-free).
//
// Edges (any M, N, K >= 1): the grid is rounded up to whole TS x TS tiles. The wide path needs
// aligned vectors, so it is taken per operand when the row length allows it (A: K % WIDTH == 0;
// B and C: N % WIDTH == 0), a condition the same for every thread (a uniform branch). Then a
// vector lies wholly inside or wholly outside the matrix and one bounds check covers it;
// otherwise the same vector is assembled from WIDTH bounds-checked scalar accesses. Out-of-range
// tile elements are zeros in shared memory (they add nothing), only in-range elements of C are
// stored, and every thread runs every tile iteration, so all reach every barrier. Buffers must
// start WIDTH*4-byte aligned (any cudaMalloc/CuPy allocation is aligned to at least 256 bytes).

#ifndef TS
#define TS 64          // tile size in M, N and K: a block computes a TS x TS tile of C
#endif
#ifndef WPT
#define WPT 8          // work per thread: C rows per thread, RTS rows apart
#endif
#ifndef WIDTH
#define WIDTH 4        // floats per vector: each of those rows is WIDTH neighbouring columns
#endif
#define RTS (TS / WPT)    // reduced tile size: threads along M in a block
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
    for (int c = 0; c < WIDTH; c++) {
        v.lane[c] = 0.0f;
    }
    return v;
}

extern "C" __global__ void matmul_4(const int M, const int N, const int K,
                                    const float* __restrict__ A, const float* __restrict__ B,
                                    float* __restrict__ C)
{
    const int local_vec = threadIdx.x;                    // 0 .. TSW-1: which vector of a row
    const int local_row = threadIdx.y;                    // 0 .. RTS-1, along M
    const int tile_row0 = blockIdx.y * TS;                // first row of this block's C tile
    const int col0 = blockIdx.x * TS + local_vec * WIDTH; // first of this thread's columns

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

    floatW acc[WPT];
    #pragma unroll
    for (int w = 0; w < WPT; w++) {
        acc[w] = zero_w();
    }

    const int num_tiles = (K + TS - 1) / TS;
    for (int t = 0; t < num_tiles; t++) {
        const int tile_k0 = t * TS;
        const int a_col = tile_k0 + local_vec * WIDTH;   // first k of this thread's A vectors

        // Each thread loads WPT vectors of each tile, RTS rows apart; consecutive
        // threads read consecutive vectors of one row (coalesced).
        #pragma unroll
        for (int w = 0; w < WPT; w++) {
            const int r = local_row + w * RTS;           // row inside the tile

            const int a_row = tile_row0 + r;
            floatW a_vec = zero_w();
            if (a_wide) {
                if (a_row < M && a_col < K) {
                    a_vec = A_vec[a_row * K_vecs + t * TSW + local_vec];
                }
            } else {
                #pragma unroll
                for (int v = 0; v < WIDTH; v++) {
                    a_vec.lane[v] = (a_row < M && a_col + v < K) ? A[a_row * K + a_col + v] : 0.0f;
                }
            }
            Asub[r][local_vec] = a_vec;

            const int b_row = tile_k0 + r;
            floatW b_vec = zero_w();
            if (bc_wide) {
                if (b_row < K && col0 < N) {
                    b_vec = B_vec[b_row * N_vecs + blockIdx.x * TSW + local_vec];
                }
            } else {
                #pragma unroll
                for (int v = 0; v < WIDTH; v++) {
                    b_vec.lane[v] = (b_row < K && col0 + v < N) ? B[b_row * N + col0 + v] : 0.0f;
                }
            }
            Bsub[r][local_vec] = b_vec;
        }
        __syncthreads();

        #pragma unroll
        for (int kv = 0; kv < TSW; kv++) {
            floatW a_lanes[WPT];                         // WIDTH consecutive k of each of my rows
            #pragma unroll
            for (int w = 0; w < WPT; w++) {
                a_lanes[w] = Asub[local_row + w * RTS][kv];
            }
            #pragma unroll
            for (int v = 0; v < WIDTH; v++) {
                const floatW b = Bsub[kv * WIDTH + v][local_vec];   // one read, reused WPT times
                #pragma unroll
                for (int w = 0; w < WPT; w++) {
                    #pragma unroll
                    for (int c = 0; c < WIDTH; c++) {
                        acc[w].lane[c] += a_lanes[w].lane[v] * b.lane[c];
                    }
                }
            }
        }
        __syncthreads();   // the tile is consumed before the next one overwrites it
    }

    #pragma unroll
    for (int w = 0; w < WPT; w++) {
        const int row = tile_row0 + local_row + w * RTS;
        if (bc_wide) {
            if (row < M && col0 < N) {
                C_vec[row * N_vecs + blockIdx.x * TSW + local_vec] = acc[w];
            }
        } else {
            #pragma unroll
            for (int v = 0; v < WIDTH; v++) {
                if (row < M && col0 + v < N) {
                    C[row * N + col0 + v] = acc[w].lane[v];
                }
            }
        }
    }
}
