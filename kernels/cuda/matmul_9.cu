// matmul_9: warp tiling with large per-thread tiles, a pre-transposed A and (CUDA) a cp.async
// pipeline; C = A * B (row-major; A is MxK, B is KxN, C is MxN).
// Over matmul_8 (two-stage shared memory, one barrier per tile, double-buffered register
// fragments, contiguous 8x8 results per thread):
//  - Warp tiling, as NVIDIA serves shared memory per 32-wide warp: each warp owns a WM x WN
//    sub-tile of the BM x BN block tile; its 32 lanes form a (WM/TM) x (WN/TN) grid, and each
//    lane's TM x TN results are (TM/4) x (TN/4) blocks of 4x4 spaced WM/(TM/4) rows and
//    WN/(TN/4) columns apart. At every step k the lanes that differ along N read consecutive
//    float4s of the B row and those along M consecutive float4s of the A^T row (the others get
//    a broadcast), so every fragment read is one conflict-free 128-bit shared load (LDS.128).
//  - Large per-thread tiles like cuBLAS' SIMT kernels: TM and TN go up to 16, e.g. a 128x128
//    block of 4 warps of 64x64 where each thread holds 16x8 = 128 accumulators (about 200
//    registers, two 128-thread blocks per SM). A step costs (TM+TN)/4 = 6 LDS.128 for 128 FFMAs
//    (matmul_8: 4 for 64), and with BK = 16 one barrier serves 2048 FFMAs per thread.
//  - A pre-pass (prepare_operands, below, launched first and timed with the kernel) writes
//    AT = A^T, K rows of LDT = round_up(M, 32) floats (pad columns are zero), into a scratch
//    buffer. Both tiles are then BK rows of contiguous floats whose starts are 16-byte aligned
//    (LDT % 4 == 0), copied as float4s straight into k-major shared memory: no transposing
//    scalar stores and no padding. LDT is a multiple of 32 floats, not just 4, so that a
//    warp's 512-byte tile row is 4 whole 128-byte lines at any M (with LDT = round_up(M, 4),
//    4097x4095x4093 spanned 5: H100, CUDA, the kernel without its pre-pass took about 4.7%
//    longer there than at 4096, 2.3% with 32). The pre-pass moves 2*M*K floats (about 1% at 4096). When
//    N % 4 != 0, B's rows are not 16-byte aligned: with PAD_B (the default) the same launch
//    also copies B into BP with rows of round_up(N, 32) floats (2*K*N more floats moved), so B
//    too is copied as float4s; PAD_B = 0 copies such a B element by element instead.
//  - Global -> shared copies are cp.async (LDGSTS, 16 bytes, .cg: L2 only) in a STAGES-deep
//    ring of shared tiles (cp.async.commit_group per tile, wait_group STAGES-2): the data
//    never passes through registers, so prefetching costs no registers and tile t+2 is in
//    flight while tile t is computed (STAGES = 3). matmul_9.cl issues the same copies through
//    inline PTX on NVIDIA sm_80+ and keeps matmul_8's register-staged double buffer elsewhere,
//    with the same tiles, shared layout, loader mapping and fragment scheme.
//  - C is written as float4 rows of each 4x4 block.
//  - A lean loader (the k loop is ~2048 FFMAs per tile at the defaults, so every other
//    instruction costs issue slots): a thread's chunks of a tile sit in one column, A_ROWS
//    (B_ROWS) rows apart, and land at shared float (tid + i*THREADS)*4, so the per-chunk
//    pointers are one 64-bit pointer per operand (set up once, advanced BK rows per tile) plus
//    block-uniform row offsets, the shared destinations are a register plus constants, and
//    the column guards are a src-size fixed per thread. Row guards (k < K) run only on a
//    ragged last tile (a uniform branch); the full tiles take the unguarded branch. Fragment
//    reads use one per-thread pointer per operand and stage, plus constant offsets. (The
//    previous loader recomputed row, column, guards and 64-bit addresses for every chunk of
//    every tile: ~200 of ~2500 instructions per tile at the defaults; now ~70.)
//  - A steady loop without branches: every iteration but the last STAGES-1 (and any with a
//    ragged tile, or off the fast loader's conditions) issues a whole tile and is followed by
//    another, so it runs a copy of the body with no guard and no branch (issue_whole_tile, the
//    wait and barrier unconditional); the rest run the guarded copy. A branch in the body
//    split it into basic blocks where the tiles meet, and there ptxas moved about a fifth of
//    the accumulators between registers every tile (416 of 2048 FFMAs wrote a register other
//    than the one they read, and ncu counted such FFMAs 2-3x as often in dispatch stalls) and
//    kept 255 registers; the steady copy keeps 213, moves 106. H100, CUDA, % of cuBLAS SGEMM
//    before / after: 2048 91.1 / 95.4, 4096 92.2 / 96.9, 8192 94.2 / 99.1, 4097x4095x4093
//    93.4 / 98.5 (issue active 81% -> 85% at 4096, instruction-fetch stalls 0.13 -> 0.07).
//  - Grouped block order (GROUP): block (x, y) is renumbered so that consecutive blocks walk
//    down columns of GROUP tile rows; the blocks resident at once then share A^T row panels
//    and B column panels in L2 (GROUP = 1 keeps the row-by-row order).
//  - Two levers measured and kept off by default (H100, CUDA, % of cuBLAS SGEMM at 4096):
//    A_PREPASS = 0 drops the pre-pass and reads A in place: 4-byte cp.async copies, 8 lanes
//    along k, transposed into a stage whose rows are swizzled (bits 2-3 of m XOR 4*(k % 4)) so
//    that a warp's stores hit 16 banks and the float4 fragment reads stay whole. It saves the
//    pre-pass (1.3% of the time at 4096, 2.7% at 2048) but costs far more: 85.9% against 92.4%,
//    63.8% against 93.3% at 1000x1030x999; likely (not profiled) the four times as many copy
//    instructions for A, each moving 4 bytes (the tensor-core steps lose as much where
//    K % 4 != 0 sends A that way).
//    K_UNROLL < BK runs a tile's steps as a loop of K_UNROLL-step chunks instead of one
//    unrolled block: the loop's machine code shrinks from 2387 instructions to 1345 (8) or 809
//    (4), and ncu's instruction-fetch stalls with it (0.13 -> 0.03 per issue), but the issue
//    rate falls (81% -> 77% -> 72% of cycles; dispatch stalls 0.26 -> 0.30 -> 0.41), and so
//    does the speed: 86.9% and 80.1%.
//
// Pipeline (one barrier per tile). Prologue: tiles 0 .. STAGES-2 are issued into stages
// 0 .. STAGES-2 (one commit group each, empty past the last tile), wait_group(STAGES-2) and a
// barrier make tile 0 visible, and the k = 0 fragments are read. Iteration t (stage t % STAGES):
//  1. issue tile t+STAGES-1 into stage (t-1) % STAGES and commit (an empty group past the end,
//     so group g is always tile g);
//  2. steps k = 0 .. BK-2: read the fragments of step k+1, FMA step k;
//  3. step BK-1: wait_group(STAGES-2) (this thread's copies of tile t+1 have landed: STAGES+t
//     groups were committed), barrier B(t) (everyone's have), read the k = 0 fragments of tile
//     t+1 into set 0 (BK is even, so step BK-1 uses set 1), then FMA step BK-1.
//  Race-free: stage (t-1) % STAGES, written from step 1 of iteration t on, was last read for
//  tile t-1 before B(t-1) (its last fragment at step BK-2 of iteration t-1), and every thread
//  has passed B(t-1) before anyone reaches iteration t; tile t+1 is read only after B(t),
//  which every thread reaches after its wait_group. With STAGES = 2 this is the classic double
//  buffer: tile t+1 is copied while steps 0 .. BK-2 of tile t compute.
//
// Edges (any M, N, K >= 1): the pre-pass guards its reads and writes (pad columns M .. LDT-1
// get zeros); the grid is rounded up to whole tiles (GROUP's renumbering is a permutation of
// the grid, a short last group included). A^T chunks are float4 always (LDT % 4 == 0: a chunk
// is all inside or all outside); a chunk outside AT (row k >= K or column >= LDT) is
// zero-filled by cp.async's src-size operand (0 bytes read, 16 zeros written), its pointer
// clamped to a row start (column) or to AT (row, last tile only). B (or BP, padded by the
// pre-pass like AT) is read as rows of LDB floats; its chunks are one 16-byte cp.async when
// LDB % 4 == 0, else (PAD_B = 0 and N % 4 != 0) four 4-byte cp.async (.ca), each zero-filled
// on its own when outside B. C is stored as float4s when N % 4 == 0, else as four guarded scalars;
// rows or columns outside C are skipped. These choices are uniform across the kernel, and every
// thread reaches every barrier (the trip counts depend on K only).
// __launch_bounds__(THREADS, MIN_BLOCKS) asks for MIN_BLOCKS blocks per SM, derived below so
// that the register cap it implies (65536 / (THREADS * MIN_BLOCKS)) never forces spills: two
// 256-thread 8x8 blocks (128 registers), two 128-thread 16x8 blocks (255), one 256-thread
// 16x8 block. The YAML's max_registers adds --maxrregcount on top: at 255 it binds nothing the
// launch bounds do not, yet ptxas allocates the 128x128 tile differently under it (216
// registers instead of 213, fewer FFMA bank conflicts) and that measured 2 points faster on an
// H100; the 128x64 and 64x64 size rules measured slower with it and set none.

#ifndef BM
#define BM 128  // rows of C per block
#endif
#ifndef BN
#define BN 128  // columns of C per block
#endif
#ifndef BK
#define BK 16   // depth of the A^T and B tiles staged in shared memory per step
#endif
#ifndef WM
#define WM 64   // rows of C per warp
#endif
#ifndef WN
#define WN 64   // columns of C per warp
#endif
#ifndef TM
#define TM 16   // rows of C per thread: TM/4 blocks of 4 rows
#endif
#ifndef TN
#define TN 8    // columns of C per thread: TN/4 blocks of 4 columns
#endif
#ifndef STAGES
#define STAGES 3  // shared-memory tiles in the cp.async ring
#endif
#ifndef GROUP
#define GROUP 8   // tile rows per group of the block order (1 = row by row), for L2 reuse
#endif
#ifndef PAD_B
#define PAD_B 1   // N % 4 != 0: the pre-pass copies B into BP with 16-byte aligned rows
#endif
#ifndef OVERLAP
#define OVERLAP 1  // sm_90+: the kernel launches as a programmatic dependent of the pre-pass
#endif
#define OVERLAPPED (OVERLAP && __CUDA_ARCH__ >= 900)
#ifndef A_PREPASS
#define A_PREPASS 1  // 1: the pre-pass writes AT = A^T; 0: the kernel reads A in place
#endif
#ifndef K_UNROLL
#define K_UNROLL 16  // steps of a tile unrolled per loop trip (>= BK: the whole tile)
#endif

#define WARP 32                                 // threads per warp
#define WARPS_N (BN / WN)                       // warps along N
#define THREADS ((BM / WM) * WARPS_N * WARP)    // threads per block
#define LANES_N (WN / TN)                       // lanes of a warp along N
#define SUB_M (TM / 4)                          // 4x4 blocks per thread along M
#define SUB_N (TN / 4)                          // 4x4 blocks per thread along N
#define SUB_M_STRIDE (WM / SUB_M)               // rows between a thread's 4x4 blocks
#define SUB_N_STRIDE (WN / SUB_N)               // columns between a thread's 4x4 blocks
#define A_F4 (BK * BM / 4)                      // float4 chunks in an A^T tile
#define B_F4 (BK * BN / 4)                      // float4 chunks in a B tile
#define A_LOADS ((A_F4 + THREADS - 1) / THREADS)  // chunks of the A^T tile per thread
#define B_LOADS ((B_F4 + THREADS - 1) / THREADS)  // chunks of the B tile per thread
#define A_ROWS (THREADS / (BM / 4))             // A^T tile rows between a thread's chunks
#define B_ROWS (THREADS / (BN / 4))             // B tile rows between a thread's chunks
// A read in place (A_PREPASS = 0): 8 lanes along k, so a warp's 4-byte copies read 4 rows of
// 32 contiguous bytes; one pass of the block covers A_ROWS_PASS rows of the tile.
#define A_LANES_K 8
#define A_ROWS_PASS (THREADS / A_LANES_K)
#define A_PASSES_M (BM / A_ROWS_PASS)           // passes down the tile's rows
#define A_PASSES_K (BK / A_LANES_K)             // passes along its depth
// Element (m, k) of an in-place tile lands at As[k][m ^ A_SWIZZLE(k)]: the 8 k of a copy
// would otherwise all hit one bank (a row of As is BM floats); XOR-ing bits 2-3 of m with k
// spreads a warp's 32 stores over 16 banks (2-way; 8 banks with 64 threads, A_SWIZZLES = 2)
// and keeps every float4 of 4 consecutive m whole, so fragment reads stay one conflict-free
// LDS.128: a lane reads its float4 at (m_base ^ A_SWIZZLE(k)) + i*SUB_M_STRIDE, since the
// swizzled bits are bits of its lane's part of m_base (WM / TM >= A_SWIZZLES lanes along M).
#define A_SWIZZLES (A_PREPASS ? 1 : (A_ROWS_PASS >= 16 ? 4 : (A_ROWS_PASS >= 8 ? 2 : 1)))
#define A_SWIZZLE(k) (4 * ((k) % A_SWIZZLES))
// Steps of a tile per unrolled chunk: all of them (BK), or chunks of K_UNROLL in a loop, which
// shrinks the loop body's machine code K_UNROLL / BK times for a pointer add per chunk.
#define KU (K_UNROLL < BK ? K_UNROLL : BK)
// Registers a thread needs, roughly: accumulators, two fragment sets, addresses and indices.
#define REG_ESTIMATE (TM * TN + 2 * (TM + TN) + 32)
#define BLOCKS_FIT (65536 / (THREADS * REG_ESTIMATE))
#define MIN_BLOCKS (BLOCKS_FIT < 1 ? 1 : (BLOCKS_FIT > 2 ? 2 : BLOCKS_FIT))

// Pre-pass: AT (K rows of LDT = round_up(M, 32) floats) = A^T, pad columns M .. LDT-1 zero;
// with PAD_B and N % 4 != 0, also BP (K rows of LDB = round_up(N, 32) floats) = B, pad columns
// zero, so that the kernel copies B as float4s too. Blocks with blockIdx.y < ceil_div(M, 32)
// transpose a 32x32 tile of A through shared memory, so that the reads (along K) and the
// writes (along M) are both coalesced (the +1 padding puts a tile column in distinct banks);
// the blocks after them copy a 32x32 tile of B, row by row (the branch is uniform per block).
// A block is 32 x 8 threads, each moving 4 elements. Grid: ceil_div(K, 32) x
// (ceil_div(M, 32) + ceil_div(N, 32) when B is padded, else + 0).
extern "C" __global__ void __launch_bounds__(256)
prepare_operands(const int M, const int N, const int K, const float* __restrict__ A,
                 const float* __restrict__ B, float* __restrict__ AT, float* __restrict__ BP) {
    __shared__ float tile[32][33];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int k0 = blockIdx.x * 32;
    const int a_blocks = A_PREPASS ? (M + 31) / 32 : 0;  // A in place: only B's tiles launched
    if ((int)blockIdx.y >= a_blocks) {  // a tile of B into BP (launched only when B is padded)
        const int ldb = (N + 31) & ~31;
        const int n = ((int)blockIdx.y - a_blocks) * 32 + tx;
#pragma unroll
        for (int r = 0; r < 32; r += 8) {
            const int k = k0 + ty + r;
            if (k < K && n < ldb) BP[(size_t)k * ldb + n] = n < N ? B[(size_t)k * N + n] : 0.0f;
        }
#if OVERLAPPED
        asm volatile("griddepcontrol.launch_dependents;");  // see the end of the function
#endif
        return;
    }
    const int ldt = (M + 31) & ~31;
    const int m0 = blockIdx.y * 32;
#pragma unroll
    for (int r = 0; r < 32; r += 8) {
        const int m = m0 + ty + r;
        const int k = k0 + tx;
        tile[ty + r][tx] = (m < M && k < K) ? A[m * K + k] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 32; r += 8) {
        const int k = k0 + ty + r;
        const int m = m0 + tx;
        if (k < K && m < ldt) AT[(size_t)k * ldt + m] = tile[tx][ty + r];
    }
#if OVERLAPPED
    // With OVERLAP, the kernel launches once every block of this grid is past this point, so
    // its launch overlaps the last blocks. Not at the start: the kernel's blocks then took
    // slots while this grid ran, and it ran 1.3-1.7x longer (docs/ladders/sgemm.md).
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

__device__ __forceinline__ unsigned shared_address(const float* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// 16 bytes global -> shared, bypassing L1; src_bytes = 0 reads nothing and writes 16 zeros.
__device__ __forceinline__ void cp_async_16(const unsigned dst, const float* src, const int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// 4 bytes global -> shared (.ca: 4-byte copies cannot bypass L1); src_bytes = 0 writes a zero.
__device__ __forceinline__ void cp_async_4(const unsigned dst, const float* src, const int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most STAGES-2 of this thread's commit groups are still in flight.
__device__ __forceinline__ void cp_async_wait_stages() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2) : "memory");
}

// Stores four consecutive elements (row, col..col+3) of C, skipping those outside it.
__device__ __forceinline__ void store4_guarded(float* __restrict__ X, const int row, const int col,
                                               const int rows, const int cols, const int vec_ok,
                                               const float4 v) {
    if (row < rows) {
        float* p = X + row * cols + col;
        if (vec_ok) {
            if (col < cols) *reinterpret_cast<float4*>(p) = v;
        } else {
            if (col < cols) p[0] = v.x;
            if (col + 1 < cols) p[1] = v.y;
            if (col + 2 < cols) p[2] = v.z;
            if (col + 3 < cols) p[3] = v.w;
        }
    }
}

// Reads the fragments of step k into a_f[TM], b_f[TN]: LDS.128 each. a_rd points at the stage
// (a_col[k % A_SWIZZLES] is this thread's first column there, swizzled by k when A is read in
// place), b_rd at this thread's first column of the stage, so every address is a register plus
// a constant offset (the unrolled k makes the a_col index a constant).
#define READ_FRAGMENTS(a_f, b_f, a_rd, b_rd, k)                                                  \
    do {                                                                                          \
        _Pragma("unroll") for (int i_ = 0; i_ < SUB_M; i_++) {                                    \
            const float4 v_ = *reinterpret_cast<const float4*>((a_rd) + a_col[(k) % A_SWIZZLES] + (k) * BM + i_ * SUB_M_STRIDE); \
            a_f[4 * i_] = v_.x; a_f[4 * i_ + 1] = v_.y; a_f[4 * i_ + 2] = v_.z; a_f[4 * i_ + 3] = v_.w; \
        }                                                                                         \
        _Pragma("unroll") for (int j_ = 0; j_ < SUB_N; j_++) {                                    \
            const float4 v_ = *reinterpret_cast<const float4*>((b_rd) + (k) * BN + j_ * SUB_N_STRIDE); \
            b_f[4 * j_] = v_.x; b_f[4 * j_ + 1] = v_.y; b_f[4 * j_ + 2] = v_.z; b_f[4 * j_ + 3] = v_.w; \
        }                                                                                         \
    } while (0)

// FMA step: acc += a_f (column) x b_f (row).
#define FMA_STEP(a_f, b_f)                                                                        \
    do {                                                                                          \
        _Pragma("unroll") for (int i_ = 0; i_ < TM; i_++)                                         \
            _Pragma("unroll") for (int j_ = 0; j_ < TN; j_++)                                     \
                acc[i_][j_] = fmaf(a_f[i_], b_f[j_], acc[i_][j_]);                                \
    } while (0)

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_9(const int M, const int N, const int K, const float* __restrict__ A,
         const float* __restrict__ AT, const float* __restrict__ B, const float* __restrict__ BP,
         float* __restrict__ C) {
    __shared__ __align__(16) float As[STAGES][BK][BM];  // A^T tiles: [k][m ^ A_SWIZZLE(k)]
    __shared__ __align__(16) float Bs[STAGES][BK][BN];  // B tiles: [k][n]

    const int tid = threadIdx.x;
    const int warp = tid / WARP;
    const int lane = tid % WARP;
    // First row / column of this thread's first 4x4 block, within the block tile.
    const int m_base = (warp / WARPS_N) * WM + (lane / LANES_N) * 4;
    const int n_base = (warp % WARPS_N) * WN + (lane % LANES_N) * 4;

    // Block -> tile of C. GROUP > 1: blocks are numbered down columns of GROUP tile rows, so
    // the blocks resident at once share A^T and B panels in L2 (GROUP = 1: row by row).
#if GROUP == 1
    const int tile_m = blockIdx.y;
    const int tile_n = blockIdx.x;
#else
    int tile_m, tile_n;
    {
        const int pid = blockIdx.y * gridDim.x + blockIdx.x;
        const int in_group = GROUP * gridDim.x;          // blocks in a group of GROUP tile rows
        const int first_m = (pid / in_group) * GROUP;
        const int rows = min((int)gridDim.y - first_m, GROUP);  // the last group may be short
        const int r = pid - (pid / in_group) * in_group;
        tile_m = first_m + r % rows;
        tile_n = r / rows;
    }
#endif
    const int block_row = tile_m * BM;
    const int block_col = tile_n * BN;
    const int ldt = (M + 31) & ~31;  // row length of AT
    // B as the loader reads it: BP, rows of round_up(N, 32) floats, when the pre-pass padded it
    // (PAD_B and N % 4 != 0), else B itself; float4 chunks when its rows are 16-byte aligned.
    const int b_padded = PAD_B && (N % 4) != 0;
    const int ldb = b_padded ? (N + 31) & ~31 : N;
    const float* const b_base = b_padded ? BP : B;
    const int b_vec = (ldb % 4) == 0;
    const int c_vec = (N % 4) == 0;  // C's rows: float4 stores
    const int num_tiles = (K + BK - 1) / BK;

    // Loader: chunk i (f = tid + i*THREADS) of a tile is row f / (W/4), column (f % (W/4))*4,
    // i.e. this thread's column plus i*(THREADS/(W/4)) rows (THREADS is a multiple of W/4), and
    // lands at float f*4 of the stage. Its global pointer is set up once and advanced by BK
    // rows per tile; a column outside AT / B gets src-size 0 and a pointer to its row start.
    // One pointer per operand (chunk 0's, clamped to its row start when the column is outside),
    // advanced by BK rows per tile; chunk i adds i*A_ROWS (B_ROWS) rows, an offset that is the
    // same for the whole block (uniform registers), so no per-chunk 64-bit pointers are kept.
#if A_PREPASS
    const int a_r0 = tid / (BM / 4);
    const int a_c = block_row + (tid % (BM / 4)) * 4;
    const int a_bytes = a_c < ldt ? 16 : 0;
    const float* a_src = AT + (size_t)a_r0 * ldt + (a_bytes ? a_c : 0);
    const size_t a_step = (size_t)BK * ldt;
    const size_t a_rows = (size_t)A_ROWS * ldt;  // floats between chunks i and i+1 of A^T
    const unsigned a_dst0 = shared_address(&As[0][0][0]) + tid * 16;
#else
    // A in place: this thread copies depth a_k (+ A_LANES_K * q) of tile rows a_r (+ A_ROWS_PASS
    // * p), 4 bytes each, to As[k][m ^ A_SWIZZLE(k)]; A_SWIZZLE(a_k + A_LANES_K * q) is
    // A_SWIZZLE(a_k), and it only flips bits of a_r (A_ROWS_PASS >= 4 * A_SWIZZLES), so every
    // destination is one register plus a constant. Rows are guarded only in the last tile row
    // of the grid (a_full_m is uniform), depths only in a ragged last tile.
    const int a_k = tid % A_LANES_K;
    const int a_r = tid / A_LANES_K;
    const int a_rows_left = M - block_row;  // rows of A from the tile's first
    const int a_full_m = a_rows_left >= BM;
    const float* a_src = A + (size_t)(block_row + (a_r < a_rows_left ? a_r : 0)) * K + a_k;
    const size_t a_step = BK;
    const size_t a_rows = (size_t)A_ROWS_PASS * K;  // floats between passes p and p+1
    const unsigned a_dst0 = shared_address(&As[0][0][0]) + (a_k * BM + (a_r ^ A_SWIZZLE(a_k))) * 4;
#endif
    const int b_r0 = tid / (BN / 4);
    const int b_c = block_col + (tid % (BN / 4)) * 4;
    const int b_bytes = b_c < ldb ? 16 : 0;  // the float4 path (ldb % 4 == 0)
    const float* b_src = b_base + (size_t)b_r0 * ldb + (b_c < ldb ? b_c : 0);
    const size_t b_step = (size_t)BK * ldb;
    const size_t b_rows = (size_t)B_ROWS * ldb;
    const unsigned b_dst0 = shared_address(&Bs[0][0][0]) + tid * 16;

    // The unguarded copies of a tile that lies inside K (and, A read in place, inside M): A^T's
    // float4s with the pre-pass, A's 4-byte copies without it, and B's float4s.
    auto issue_whole_a = [&](const unsigned a_dst) {
#if A_PREPASS
#pragma unroll
        for (int i = 0; i < A_LOADS; i++)
            if (A_F4 % THREADS == 0 || a_r0 + i * A_ROWS < BK)
                cp_async_16(a_dst + i * THREADS * 16, a_src + i * a_rows, a_bytes);
#else
#pragma unroll
        for (int p = 0; p < A_PASSES_M; p++)
#pragma unroll
            for (int q = 0; q < A_PASSES_K; q++)
                cp_async_4(a_dst + (q * A_LANES_K * BM + p * A_ROWS_PASS) * 4,
                           a_src + p * a_rows + q * A_LANES_K, 4);
#endif
    };
    auto issue_whole_b = [&](const unsigned b_dst) {
#pragma unroll
        for (int i = 0; i < B_LOADS; i++)
            if (B_F4 % THREADS == 0 || b_r0 + i * B_ROWS < BK)
                cp_async_16(b_dst + i * THREADS * 16, b_src + i * b_rows, b_bytes);
    };

    // Issues the copies of a whole tile (inside K, B copied as float4s, and with A read in place
    // inside M) into stage s, then advances the pointers: no guards, no branches.
    auto issue_whole_tile = [&](const int s) {
        const unsigned a_dst = a_dst0 + s * (BK * BM * 4);
        const unsigned b_dst = b_dst0 + s * (BK * BN * 4);
        issue_whole_a(a_dst);
        issue_whole_b(b_dst);
        a_src += a_step;
        b_src += b_step;
    };

    // Issues the copies of the tile at depth k0 into stage s, then advances the pointers, with
    // the guards any tile may need: a ragged last tile, B's 4-byte path, A's last tile row.
    auto issue_tile = [&](const int s, const int k0) {
        const unsigned a_dst = a_dst0 + s * (BK * BM * 4);
        const unsigned b_dst = b_dst0 + s * (BK * BN * 4);
        if (k0 + BK <= K) {
#if A_PREPASS
            issue_whole_a(a_dst);
#endif
            if (b_vec) issue_whole_b(b_dst);
        } else {
#if A_PREPASS
#pragma unroll
            for (int i = 0; i < A_LOADS; i++)
                if (A_F4 % THREADS == 0 || a_r0 + i * A_ROWS < BK) {
                    const int in = k0 + a_r0 + i * A_ROWS < K;
                    cp_async_16(a_dst + i * THREADS * 16, in ? a_src + i * a_rows : AT, in ? a_bytes : 0);
                }
#endif
            if (b_vec) {
#pragma unroll
                for (int i = 0; i < B_LOADS; i++)
                    if (B_F4 % THREADS == 0 || b_r0 + i * B_ROWS < BK) {
                        const int in = k0 + b_r0 + i * B_ROWS < K;
                        cp_async_16(b_dst + i * THREADS * 16, in ? b_src + i * b_rows : b_base, in ? b_bytes : 0);
                    }
            }
        }
#if !A_PREPASS
        if (a_full_m && k0 + BK <= K) {  // uniform: every copy inside A
            issue_whole_a(a_dst);
        } else {  // the grid's last tile row or a ragged last tile: zeros outside A
#pragma unroll
            for (int p = 0; p < A_PASSES_M; p++)
#pragma unroll
                for (int q = 0; q < A_PASSES_K; q++) {
                    const int in = a_r + p * A_ROWS_PASS < a_rows_left && k0 + a_k + q * A_LANES_K < K;
                    cp_async_4(a_dst + (q * A_LANES_K * BM + p * A_ROWS_PASS) * 4,
                               in ? a_src + p * a_rows + q * A_LANES_K : A, in ? 4 : 0);
                }
        }
#endif
        if (!b_vec) {  // B unpadded, N % 4 != 0: rows not 16-byte aligned, four guarded 4-byte copies
#pragma unroll
            for (int i = 0; i < B_LOADS; i++)
                if (B_F4 % THREADS == 0 || b_r0 + i * B_ROWS < BK) {
                    const int row_in = k0 + b_r0 + i * B_ROWS < K;
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int in = row_in && b_c + e < ldb;
                        cp_async_4(b_dst + i * THREADS * 16 + 4 * e, in ? b_src + i * b_rows + e : b_base, in ? 4 : 0);
                    }
                }
        }
        a_src += a_step;
        b_src += b_step;
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;
    float a_frag[2][TM];  // two sets: step k+1 is read while step k is computed
    float b_frag[2][TN];
    const float* const a_rd0 = &As[0][0][0];
    int a_col[A_SWIZZLES];  // this thread's first column at steps k with k % A_SWIZZLES == c
#pragma unroll
    for (int c = 0; c < A_SWIZZLES; c++) a_col[c] = m_base ^ A_SWIZZLE(c);
    const float* const b_rd0 = &Bs[0][0][0] + n_base;

#if OVERLAPPED
    // Launched as a programmatic dependent of the pre-pass (OVERLAP), nothing above reads memory:
    // wait here until the pre-pass has finished and its AT and BP are visible (a no-op when
    // launched without it).
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    // Prologue: tiles 0 .. STAGES-2 in flight (group g = tile g), tile 0 visible, its k=0 fragments.
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < num_tiles) issue_tile(s, s * BK);
        cp_async_commit();
    }
    cp_async_wait_stages();
    __syncthreads();
    READ_FRAGMENTS(a_frag[0], b_frag[0], a_rd0, b_rd0, 0);

    // The tile loop runs in two phases, the steady one first. A steady iteration issues a whole
    // tile (issue_whole_tile) and is followed by another tile, so its body has no branch at all:
    // one basic block, which ptxas schedules and allocates as one (the guarded body's branches
    // split it where the tiles meet, and ptxas then moved about a fifth of the accumulators
    // between registers there). The last STAGES-1 iterations (all of them when a tile may need
    // guards: B's 4-byte path, A's last tile row in place) run the guarded body; a ragged last
    // tile is among them. The phase loop is unrolled, so `steady` is a constant in each copy.
#if A_PREPASS
    const int whole_loads = b_vec;  // the fast loader's conditions, uniform for the block
#else
    const int whole_loads = b_vec && a_full_m;
#endif
    // Iterations whose issued tile, t + STAGES - 1, is whole: K / BK - (STAGES - 1) of them.
    const int steady_tiles = whole_loads ? max(K / BK - (STAGES - 1), 0) : 0;
    int cur = 0;               // stage of tile t
    int fill = STAGES - 1;     // stage of tile t + STAGES - 1 (= stage of tile t-1)
    int t = 0;
#pragma unroll
    for (int phase = 0; phase < 2; phase++) {
        const bool steady = phase == 0;
        const int phase_end = steady ? steady_tiles : num_tiles;
        for (; t < phase_end; t++) {
            // 1. Tile t+STAGES-1 into the stage tile t-1 used (everyone passed B(t-1) since reading it).
            if (steady) issue_whole_tile(fill);
            else if (t + STAGES - 1 < num_tiles) issue_tile(fill, (t + STAGES - 1) * BK);
            cp_async_commit();
            const int next = cur + 1 == STAGES ? 0 : cur + 1;  // stage of tile t+1
            const float* const a_rd = a_rd0 + cur * (BK * BM);
            const float* const b_rd = b_rd0 + cur * (BK * BN);

            // 2. Steps k = 0 .. BK-2: read the fragments of step k+1, FMA step k.
            // 3. Step BK-1: wait for tile t+1, barrier, its k=0 fragments into set 0, FMA.
            // The steps run in chunks of KU, unrolled; with KU < BK the chunks are trips of a
            // loop that is not unrolled, and the last step's branch is taken in the last trip
            // only (uniform). kc is a multiple of KU (even, and of A_SWIZZLES), so step kc + kk
            // has kk's fragment set and swizzle, and only the chunk's stage pointers move.
            // KU = BK: one trip, the whole tile unrolled with constant offsets.
#pragma unroll 1
            for (int kc = 0; kc < BK; kc += KU) {
                const float* const a_chunk = a_rd + kc * BM;
                const float* const b_chunk = b_rd + kc * BN;
#pragma unroll
                for (int kk = 0; kk < KU; kk++) {
                    if (kk < KU - 1 || kc + KU < BK) {
                        READ_FRAGMENTS(a_frag[(kk + 1) % 2], b_frag[(kk + 1) % 2], a_chunk, b_chunk, kk + 1);
                    } else if (steady || t + 1 < num_tiles) {  // step BK-1; uniform across the block
                        cp_async_wait_stages();  // this thread's copies of tile t+1 have landed
                        __syncthreads();         // B(t): everyone's have; the one barrier per tile
                        READ_FRAGMENTS(a_frag[0], b_frag[0], a_rd0 + next * (BK * BM), b_rd0 + next * (BK * BN), 0);
                    }
                    FMA_STEP(a_frag[kk % 2], b_frag[kk % 2]);
                }
            }
            fill = cur;
            cur = next;
        }
    }

    // Epilogue: each row of each 4x4 block as one float4 store.
#pragma unroll
    for (int i = 0; i < SUB_M; i++)
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int j = 0; j < SUB_N; j++) {
                const int row = block_row + m_base + i * SUB_M_STRIDE + r;
                const int col = block_col + n_base + j * SUB_N_STRIDE;
                store4_guarded(C, row, col, M, N, c_vec,
                               make_float4(acc[4 * i + r][4 * j], acc[4 * i + r][4 * j + 1],
                                           acc[4 * i + r][4 * j + 2], acc[4 * i + r][4 * j + 3]));
            }
}
