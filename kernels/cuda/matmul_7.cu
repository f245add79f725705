// matmul_7: 2D register blocking with wide loads (myGEMM step 7, adapted to row-major C = A*B).
// CUDA mirror of kernels/opencl/matmul_7.cl: the same algorithm, line for line.
//
// What changes over matmul_6: global memory and shared memory are accessed as float4.
//  - Each thread loads the tiles as float4s: LPTA (LPTB) float4s per tile instead of four
//    times as many floats, and stores them to shared memory as float4s.
//  - The register block is made of 4-wide pieces: a thread owns WPTM/4 groups of 4
//    consecutive C rows (RTSM groups apart) and WPTN/4 groups of 4 consecutive C columns (RTSN
//    groups apart). For each k it reads its A and B values from shared memory as WPTM/4 + WPTN/4
//    float4s (4 at the defaults) instead of WPTM + WPTN floats (16).
//  - C is stored as float4s.
// The A pre-pass (transpose_pre) now pads each row of AT to a multiple of 4 floats with zeros,
// so every row of AT starts 16-byte aligned and the A tile always takes the float4 path.
//
// Why it is faster: a quarter of the load/store instructions for the same bytes, both global
// (full 16-byte accesses per thread, fewer address calculations) and shared (the inner loop
// issues 4 shared reads per 64 multiply-adds at the defaults instead of 16), so more issue slots
// go to the multiply-adds. The float4 reads stay conflict-free: consecutive threads of a warp
// read consecutive float4s of Bsub[k] and the same one or two float4s of Asub[k] (a broadcast).
// Areg, Breg and acc are indexed only by unrolled constants, so they live in registers.
//
// Edges (any M, N, K >= 1): rows of AT are padded to round_up(M, 4) floats with zeros, so an A
// float4 is wholly inside or outside the padded row. B and C use float4s when N % 4 == 0 (the
// same for every thread: a uniform branch), then a float4 is wholly in or out of range;
// otherwise their float4s are assembled from / split into four bounds-checked scalar accesses.
// Out-of-range tile elements are zeros in shared memory, only in-range C elements are stored, and
// every thread runs every tile iteration, so all reach every barrier. Buffers must start at a
// 16-byte aligned address (true for any cudaMalloc/CuPy allocation).

#ifndef TSM
#define TSM 128        // tile size in M: rows of C per block
#endif
#ifndef TSN
#define TSN 128        // tile size in N: columns of C per block
#endif
#ifndef TSK
#define TSK 16         // tile size in K: depth of the A and B tiles in shared memory
#endif
#ifndef WPTM
#define WPTM 8         // work per thread in M: rows of C per thread, in groups of 4
#endif
#ifndef WPTN
#define WPTN 8         // work per thread in N: columns of C per thread, in groups of 4
#endif
#ifndef TRANS_TS
#define TRANS_TS 32    // tile size of the transpose pre-pass (TRANS_TS x TRANS_TS threads)
#endif
#define RTSM (TSM / WPTM)                  // reduced tile size in M: threads along M
#define RTSN (TSN / WPTN)                  // reduced tile size in N: threads along N
#define THREADS (RTSM * RTSN)              // threads per block
#define TSM4 (TSM / 4)                     // float4s per row of the A tile
#define TSN4 (TSN / 4)                     // float4s per row of the B tile
#define WPTM4 (WPTM / 4)                   // groups of 4 rows per thread
#define WPTN4 (WPTN / 4)                   // groups of 4 columns per thread
#define LPTA ((TSK * TSM4) / THREADS)      // float4 loads per thread for the A tile
#define LPTB ((TSK * TSN4) / THREADS)      // float4 loads per thread for the B tile

// Pre-pass: dst (cols x round_up(rows, 4)) = src^T for a row-major rows x cols src, each dst row
// padded with zeros to a multiple of 4 floats so that it starts 16-byte aligned. Called with
// (M, K, A, AT). A TRANS_TS x TRANS_TS tile goes through shared memory so that both the read and
// the write are coalesced; the +1 padding puts a tile column in distinct banks. The grid covers
// round_up(rows, TRANS_TS) >= round_up(rows, 4) dst columns, so the padding is written too.
extern "C" __global__ void transpose_pre(const int rows, const int cols,
                                         const float* __restrict__ src, float* __restrict__ dst)
{
    __shared__ float tile[TRANS_TS][TRANS_TS + 1];
    const int dst_stride = (rows + 3) / 4 * 4;
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int src_col = blockIdx.x * TRANS_TS + tx;
    const int src_row = blockIdx.y * TRANS_TS + ty;
    tile[ty][tx] = (src_row < rows && src_col < cols) ? src[src_row * cols + src_col] : 0.0f;
    __syncthreads();
    const int dst_row = blockIdx.x * TRANS_TS + ty;        // a column of src
    const int dst_col = blockIdx.y * TRANS_TS + tx;        // a row of src (or padding)
    if (dst_row < cols && dst_col < dst_stride) {
        dst[dst_row * dst_stride + dst_col] = tile[tx][ty];
    }
}

extern "C" __global__ void matmul_7(const int M, const int N, const int K,
                                    const float* __restrict__ AT, const float* __restrict__ B,
                                    float* __restrict__ C)
{
    const int tx = threadIdx.x;                         // 0 .. RTSN-1, along N
    const int ty = threadIdx.y;                         // 0 .. RTSM-1, along M
    const int tid = ty * RTSN + tx;                     // 0 .. THREADS-1, for the tile loads
    const int tile_row0 = blockIdx.y * TSM;             // first row of this block's C tile
    const int tile_col0 = blockIdx.x * TSN;             // first column of this block's C tile

    const int AT_row4 = (M + 3) / 4;                    // float4s per (padded) row of AT
    const bool n_wide = (N % 4) == 0;                   // uniform: B and C rows 16-byte aligned?
    const int N4 = N / 4;                               // float4s per row of B and C (if n_wide)
    const float4* __restrict__ AT4 = reinterpret_cast<const float4*>(AT);
    const float4* __restrict__ B4 = reinterpret_cast<const float4*>(B);
    float4* __restrict__ C4 = reinterpret_cast<float4*>(C);

    __shared__ float4 Asub[TSK][TSM4];   // Asub[k][m/4]: a TSK x TSM tile of AT
    __shared__ float4 Bsub[TSK][TSN4];   // Bsub[k][n/4]: a TSK x TSN tile of B

    float Areg[WPTM];
    float Breg[WPTN];
    float acc[WPTM][WPTN];
    #pragma unroll
    for (int wm = 0; wm < WPTM; wm++) {
        #pragma unroll
        for (int wn = 0; wn < WPTN; wn++) {
            acc[wm][wn] = 0.0f;
        }
    }

    const int num_tiles = (K + TSK - 1) / TSK;
    for (int t = 0; t < num_tiles; t++) {
        const int tile_k0 = t * TSK;

        // Both tiles are TSK rows of contiguous float4s; thread tid loads float4s
        // tid, tid + THREADS, ... in row-major order, so a warp reads consecutive addresses.
        #pragma unroll
        for (int l = 0; l < LPTA; l++) {
            const int idx = tid + l * THREADS;
            const int k = idx / TSM4;
            const int m4 = idx % TSM4;
            const int a_row = tile_k0 + k;              // row of AT = column of A
            const int a_col4 = tile_row0 / 4 + m4;      // float4 column of AT: rows 4*a_col4.. of A
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (a_row < K && a_col4 < AT_row4) {
                v = AT4[a_row * AT_row4 + a_col4];
            }
            Asub[k][m4] = v;
        }
        #pragma unroll
        for (int l = 0; l < LPTB; l++) {
            const int idx = tid + l * THREADS;
            const int k = idx / TSN4;
            const int n4 = idx % TSN4;
            const int b_row = tile_k0 + k;
            const int b_col = tile_col0 + n4 * 4;       // first of the four columns
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (n_wide) {
                if (b_row < K && b_col < N) {
                    v = B4[b_row * N4 + b_col / 4];
                }
            } else if (b_row < K) {
                const float* __restrict__ b_ptr = B + b_row * N + b_col;
                v.x = (b_col + 0 < N) ? b_ptr[0] : 0.0f;
                v.y = (b_col + 1 < N) ? b_ptr[1] : 0.0f;
                v.z = (b_col + 2 < N) ? b_ptr[2] : 0.0f;
                v.w = (b_col + 3 < N) ? b_ptr[3] : 0.0f;
            }
            Bsub[k][n4] = v;
        }
        __syncthreads();

        #pragma unroll
        for (int k = 0; k < TSK; k++) {
            #pragma unroll
            for (int i = 0; i < WPTM4; i++) {
                const float4 a = Asub[k][ty + i * RTSM];
                Areg[4 * i + 0] = a.x;
                Areg[4 * i + 1] = a.y;
                Areg[4 * i + 2] = a.z;
                Areg[4 * i + 3] = a.w;
            }
            #pragma unroll
            for (int j = 0; j < WPTN4; j++) {
                const float4 b = Bsub[k][tx + j * RTSN];
                Breg[4 * j + 0] = b.x;
                Breg[4 * j + 1] = b.y;
                Breg[4 * j + 2] = b.z;
                Breg[4 * j + 3] = b.w;
            }
            #pragma unroll
            for (int wm = 0; wm < WPTM; wm++) {
                #pragma unroll
                for (int wn = 0; wn < WPTN; wn++) {
                    acc[wm][wn] += Areg[wm] * Breg[wn];
                }
            }
        }
        __syncthreads();                // the tiles are consumed before the next ones land
    }

    // acc[4*i + r][4*j + c] is C row tile_row0 + 4*(ty + i*RTSM) + r, column
    // tile_col0 + 4*(tx + j*RTSN) + c.
    #pragma unroll
    for (int i = 0; i < WPTM4; i++) {
        #pragma unroll
        for (int r = 0; r < 4; r++) {
            const int wm = 4 * i + r;
            const int row = tile_row0 + 4 * (ty + i * RTSM) + r;
            #pragma unroll
            for (int j = 0; j < WPTN4; j++) {
                const int col = tile_col0 + 4 * (tx + j * RTSN);
                if (row < M) {
                    if (n_wide) {
                        if (col < N) {
                            float4 out;
                            out.x = acc[wm][4 * j + 0];
                            out.y = acc[wm][4 * j + 1];
                            out.z = acc[wm][4 * j + 2];
                            out.w = acc[wm][4 * j + 3];
                            C4[row * N4 + col / 4] = out;
                        }
                    } else {
                        #pragma unroll
                        for (int c = 0; c < 4; c++) {
                            if (col + c < N) {
                                C[row * N + col + c] = acc[wm][4 * j + c];
                            }
                        }
                    }
                }
            }
        }
    }
}
