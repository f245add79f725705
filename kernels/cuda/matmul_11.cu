// matmul_11: FP32-accurate SGEMM on TF32 tensor cores, the "3xTF32" error-compensated scheme
// (as CUTLASS's fast-accurate SGEMM); C = A * B (row-major; A is MxK, B is KxN, C is MxN).
//
// Over matmul_10 (TF32 tensor cores, reduced precision): every operand x is split into a big
// part, an exact TF32 value, and the remainder:
//     big = x rounded to 11 significant bits, small = x - big (exact in FP32; the tensor
//     core reads its top 11 bits)
// and each product is accumulated in FP32 from three tensor-core products:
//     a*b ~= a_big*b_small + a_small*b_big + a_big*b_big
// big and small together hold 22 of FP32's 24 significand bits; the dropped a_small*b_small
// term is about 2^-22 of the product, so the result is as accurate as an FP32 FFMA product
// (the runner checks it with the FP32 tolerance and records its error next to cuBLAS SGEMM's).
// The small products go first, into a product tile d that the tensor cores sum over KCHUNK
// 8-deep steps and that is then added to the accumulator with a rounding FADD (see acc and d
// below: the tensor cores' own accumulation truncates). Three
// products cost three mma.sync per tile, but the fragments are read from shared memory once,
// as 64-bit reads, and the split is 3 integer/FP32 instructions per fragment element.
// (The first version split with cvt.rna.tf32.f32, which sm_90 does not have as one instruction:
// 753 instructions in the main loop for 96 mma.sync, against the pipe's room for about 6 per
// mma at its measured 318 TFLOPS on an H100, python -m runner.ceiling.)
//
// Tensor cores: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (sm_80 and later), one warp
// computing a 16x8 tile of C from a 16x8 tile of A and an 8x8 tile of B. Fragment layout
// (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32), with g = lane / 4, t = lane % 4:
//   A (row-major 16x8): a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4]
//   B (8x8, "col"):     b0 = B[t][g], b1 = B[t+4][g]
//   C (16x8):           c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
//
// Tiling: a block of (BM/WM) x (BN/WN) warps computes a BM x BN tile of C; each warp a WM x WN
// tile as (WM/16) x (WN/8) mma tiles, that is (WM/16)*(WN/8)*4 accumulators per thread. A and B
// tiles (BK deep) go global -> shared with cp.async (LDGSTS, no registers) in a STAGES-deep
// ring (each thread's sources, offsets and guards worked out once, only the depth changes per
// tile: 63.9 TFLOPS at 4096 on an H100, from 59.6 when every tile recomputed them; kept per
// load, or on ragged shapes compactly, COMPACT_PLAN below), one barrier per tile, in one
// shared array; both are stored as in global memory (A: [m][k], B: [k][n]), so
// no pre-pass is needed, with rows whose length is an odd multiple of 8 floats (mod 32), so
// every 64-bit fragment read is conflict-free (the k-loop says which elements a lane reads):
//   A rows of A_LD = BK (8) or BK + 8 (16, 32) floats: lanes (g, t), g < 4 of a half-warp, read
//     words g*A_LD + 2t, 2t + 1: four distinct groups of 8 banks, 32 banks in all;
//   B rows of B_LD = BN + 4 floats: lanes read words 2t*B_LD + 2g, + 1 = 8t + 2g (mod 32),
//     likewise (the k-permuted rows 2t and 2t + 1 are why it is not BN + 8).
// Grouped block order (GROUP) as in matmul_9, for L2 reuse.
//
// Pipeline (one barrier per tile): the prologue issues tiles 0 .. STAGES-2, one commit group
// each. Iteration t: wait_group(STAGES-2) (this thread's copies of tile t landed), barrier (so
// have everyone's, and everyone finished computing tile t-1), issue tile t+STAGES-1 into the
// stage tile t-1 used, commit (an empty group past the end, so group g is always tile g),
// then compute tile t from its stage.
//
// Edges (any M, N, K >= 1): the grid is rounded up to whole tiles; a tile chunk outside A or B
// is zero-filled by cp.async's src-size operand (0 bytes read, zeros written; the pointer then
// is the matrix's start), so a ragged tile adds zeros to the sums. A chunks are 16-byte copies
// when K % 4 == 0 (a chunk is then all inside or all outside), else four 4-byte ones guarded one
// by one; B chunks likewise with N % 4. C is stored as float4s when N % 4 == 0, else as
// guarded scalars; elements outside C are skipped. The choices are uniform and every thread
// reaches every barrier (the trip count depends on K only).
//
// Split-K (SPLIT_K > 1, chosen by size rules where the 128x128 tiles leave block slots empty:
// 1024 is 64 tiles for 264 slots): block z sums slice z of K, a whole number of tiles, into its
// own partial C in P; sum_slices then adds the slices into C in order (deterministic).

#ifndef BM
#define BM 128  // rows of C per block
#endif
#ifndef BN
#define BN 128  // columns of C per block
#endif
#ifndef BK
#define BK 8   // depth of the A and B tiles in shared memory (a multiple of the mma's k = 8)
#endif
#ifndef WM
#define WM 64   // rows of C per warp (a multiple of the mma's m = 16)
#endif
#ifndef WN
#define WN 64   // columns of C per warp (a multiple of the mma's n = 8)
#endif
#ifndef STAGES
#define STAGES 3  // shared-memory tiles in the cp.async ring
#endif
#ifndef GROUP
#define GROUP 8   // tile rows per group of the block order (1 = row by row), for L2 reuse
#endif
#ifndef KCHUNK
#define KCHUNK 1  // 8-deep steps whose products the tensor cores sum before the rounding FADD
#endif

#ifndef COMPACT_PLAN
#define COMPACT_PLAN 0  // 1: the copy plan keeps each load's source, the rest from the first load
#endif

#ifndef SPLIT_K
#define SPLIT_K 1  // slices of K, one block of each per tile of C (grid z); > 1: C is their sum
#endif

#ifndef BLOCKS_PER_SM
#define BLOCKS_PER_SM 0  // CUDA: blocks per SM for __launch_bounds__ (0: from a register estimate)
#endif

#define WARP 32
#define WARPS_N (BN / WN)                        // warps along N
#define THREADS ((BM / WM) * WARPS_N * WARP)     // threads per block
#define MT (WM / 16)                             // mma tiles per warp along M
#define NT (WN / 8)                              // mma tiles per warp along N
#define A_LD (BK % 16 == 0 ? BK + 8 : BK)       // row of an A tile in floats: 8 or 24 mod 32
#define B_LD (BN + 4)                            // row of a B tile in floats: 4 mod 32
#define A_CHUNKS (BM * BK / 4)                   // 16-byte chunks in an A tile
#define B_CHUNKS (BK * BN / 4)                   // 16-byte chunks in a B tile
#define A_LOADS ((A_CHUNKS + THREADS - 1) / THREADS)
#define A_STAGE_BYTES (BM * A_LD * 4)            // one A tile in shared memory
#define B_STAGE_BYTES (BK * B_LD * 4)
#define B_LOADS ((B_CHUNKS + THREADS - 1) / THREADS)
#define STEPS (BK / 8)                           // 8-deep mma steps per tile
#define TILES_PER_CHUNK (KCHUNK > STEPS ? KCHUNK / STEPS : 1)  // tiles a product tile spans
// Registers a thread needs, roughly: accumulators (and live product tiles when KCHUNK > 1), big
// and small fragments, addresses.
#define REG_ESTIMATE (MT * NT * 4 * (KCHUNK > 1 ? 2 : 1) + 2 * (MT * 4 + NT * 2) + 40)
#define BLOCKS_FIT (65536 / (THREADS * REG_ESTIMATE))
// Blocks per SM promised to __launch_bounds__ (the compiler then keeps to 65536 / (THREADS *
// MIN_BLOCKS) registers a thread): BLOCKS_PER_SM, or when it is 0, what the estimate allows.
#if BLOCKS_PER_SM > 0
#define MIN_BLOCKS BLOCKS_PER_SM
#else
#define MIN_BLOCKS (BLOCKS_FIT < 1 ? 1 : (BLOCKS_FIT > 2 ? 2 : BLOCKS_FIT))
#endif

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

// x = big + small for the tensor cores, which read a TF32 operand's sign, exponent and top 10
// mantissa bits from a 32-bit register and ignore the low 13. big: x rounded to 11 significant
// bits, half away from zero, by integer arithmetic (2 instructions; PTX's cvt.rna.tf32.f32 is
// not native on sm_90 and compiles to about 6); small = x - big, exact in FP32, passed as it is,
// so the tensor core truncates it to its top 11 bits: |x - big - small_used| <= 2^-22 |x|.
// (Finite inputs: for |x| within 2^-12 of FLT_MAX, or inf, big would overflow.)
__device__ __forceinline__ void split_tf32(const float x, unsigned& big, unsigned& small) {
    big = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    small = __float_as_uint(x - __uint_as_float(big));
}

// d += a * b on the tensor cores: a 16x8 A fragment, an 8x8 B fragment, a 16x8 FP32 tile.
__device__ __forceinline__ void mma_tf32(float* d, const unsigned* a, const unsigned* b) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// What one thread copies of every A and B tile, worked out once before the k loop (per tile
// only the depth k0 changes). Chunks past the tile (when the tile has fewer chunks than
// THREADS * LOADS) are never copied, and sources outside the matrix are never dereferenced.
// Two ways to keep it (COMPACT_PLAN), each answering the same questions about load i: its
// source at k0 = 0 (a_src, b_src), its byte offset in a stage (a_dst, b_dst), its column of A or
// row of B (a_col, b_row), whether its row of A lies inside (a_row_in), and how many columns of
// B are left in the matrix from its first (b_col_end).
#if COMPACT_PLAN == 0
// Every load's own answers, in registers: the fewest instructions per tile, but at 255
// registers ptxas spills part of the plan (52 bytes).
struct CopyPlan {
    const float* a_src_[A_LOADS];
    unsigned a_dst_[A_LOADS];
    int a_col_[A_LOADS];
    bool a_row_in_[A_LOADS];
    const float* b_src_[B_LOADS];
    unsigned b_dst_[B_LOADS];
    int b_row_[B_LOADS];
    int b_col_end_[B_LOADS];
    __device__ __forceinline__ const float* a_src(int i) const { return a_src_[i]; }
    __device__ __forceinline__ unsigned a_dst(int i) const { return a_dst_[i]; }
    __device__ __forceinline__ int a_col(int i) const { return a_col_[i]; }
    __device__ __forceinline__ bool a_row_in(int i) const { return a_row_in_[i]; }
    __device__ __forceinline__ const float* b_src(int i) const { return b_src_[i]; }
    __device__ __forceinline__ unsigned b_dst(int i) const { return b_dst_[i]; }
    __device__ __forceinline__ int b_row(int i) const { return b_row_[i]; }
    __device__ __forceinline__ int b_col_end(int i) const { return b_col_end_[i]; }
};

__device__ __forceinline__ CopyPlan plan_copies(const float* __restrict__ A,
                                                const float* __restrict__ B, const int M,
                                                const int N, const int K, const int block_row,
                                                const int block_col) {
    CopyPlan plan;
#pragma unroll
    for (int i = 0; i < A_LOADS; i++) {
        const int chunk = threadIdx.x + i * THREADS;
        const int row = chunk / (BK / 4);
        const int col = (chunk % (BK / 4)) * 4;
        const int m = block_row + row;
        plan.a_src_[i] = A + (size_t)min(m, M - 1) * K + col;
        plan.a_dst_[i] = (unsigned)((row * A_LD + col) * sizeof(float));
        plan.a_col_[i] = col;
        plan.a_row_in_[i] = m < M;
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; i++) {
        const int chunk = threadIdx.x + i * THREADS;
        const int row = chunk / (BN / 4);
        const int col = (chunk % (BN / 4)) * 4;
        const int n = block_col + col;
        plan.b_src_[i] = B + (size_t)row * N + min(n, N - 1);
        plan.b_dst_[i] = (unsigned)((row * B_LD + col) * sizeof(float));
        plan.b_row_[i] = row;
        plan.b_col_end_[i] = N - n;
    }
    return plan;
}
#else
// Every load's own source pointer, the rest from the first load's answers and a bit per load:
// THREADS is a multiple of the chunks in a row of either tile, so a thread's loads share one
// column of A (rows A_ROW_STEP apart) and the columns of B (rows B_ROW_STEP apart). More
// instructions per tile than the per-load plan, but no spill: the guarded 4-byte copies of the
// ragged paths (K % 4 or N % 4 != 0) run much faster (H100, 4097x4095x4093: 55.8 TFLOPS against
// 39.2; a plan that also worked out each source from the first ran 52.8 with a 12-byte spill),
// the 16-byte path slower (4096: 60.8 against 65.2), so a size rule takes it for ragged shapes
// only.
#define A_ROW_STEP (THREADS / (BK / 4))
#define B_ROW_STEP (THREADS / (BN / 4))
static_assert(THREADS % (BK / 4) == 0 && THREADS % (BN / 4) == 0,
              "a thread's chunks must share their columns");
struct CopyPlan {
    const float* a_src_[A_LOADS];
    const float* b_src_[B_LOADS];
    unsigned a_dst0;
    int a_col0;
    unsigned a_rows_in;   // bit i: load i's row of A lies inside
    unsigned b_dst0;
    int b_row0;
    int b_col_end0;
    __device__ __forceinline__ const float* a_src(int i) const { return a_src_[i]; }
    __device__ __forceinline__ unsigned a_dst(int i) const {
        return a_dst0 + i * A_ROW_STEP * A_LD * sizeof(float);
    }
    __device__ __forceinline__ int a_col(int) const { return a_col0; }
    __device__ __forceinline__ bool a_row_in(int i) const { return (a_rows_in >> i) & 1u; }
    __device__ __forceinline__ const float* b_src(int i) const { return b_src_[i]; }
    __device__ __forceinline__ unsigned b_dst(int i) const {
        return b_dst0 + i * B_ROW_STEP * B_LD * sizeof(float);
    }
    __device__ __forceinline__ int b_row(int i) const { return b_row0 + i * B_ROW_STEP; }
    __device__ __forceinline__ int b_col_end(int) const { return b_col_end0; }
};

__device__ __forceinline__ CopyPlan plan_copies(const float* __restrict__ A,
                                                const float* __restrict__ B, const int M,
                                                const int N, const int K, const int block_row,
                                                const int block_col) {
    CopyPlan plan;
    const int a_row = threadIdx.x / (BK / 4);
    plan.a_col0 = (threadIdx.x % (BK / 4)) * 4;
    plan.a_dst0 = (unsigned)((a_row * A_LD + plan.a_col0) * sizeof(float));
    plan.a_rows_in = 0;
#pragma unroll
    for (int i = 0; i < A_LOADS; i++) {
        const int m = block_row + a_row + i * A_ROW_STEP;
        plan.a_rows_in |= (m < M ? 1u : 0u) << i;
        plan.a_src_[i] = A + (size_t)min(m, M - 1) * K + plan.a_col0;
    }
    plan.b_row0 = threadIdx.x / (BN / 4);
    const int b_col = (threadIdx.x % (BN / 4)) * 4;
    plan.b_dst0 = (unsigned)((plan.b_row0 * B_LD + b_col) * sizeof(float));
    plan.b_col_end0 = N - (block_col + b_col);
#pragma unroll
    for (int i = 0; i < B_LOADS; i++)
        plan.b_src_[i] = B + (size_t)(plan.b_row0 + i * B_ROW_STEP) * N +
                         min(block_col + b_col, N - 1);
    return plan;
}
#endif

// Issues the copies of the A and B tiles at depth k0 into one stage of the ring (shared
// addresses a_stage and b_stage).
__device__ __forceinline__ void load_tile(const CopyPlan& plan, const unsigned a_stage,
                                          const unsigned b_stage, const float* __restrict__ A,
                                          const float* __restrict__ B, const int N, const int K,
                                          const int k0, const int a_vec, const int b_vec) {
#pragma unroll
    for (int i = 0; i < A_LOADS; i++) {
        if (A_CHUNKS % THREADS == 0 || threadIdx.x + i * THREADS < A_CHUNKS) {
            const int k = k0 + plan.a_col(i);
            const unsigned dst = a_stage + plan.a_dst(i);
            const float* src = plan.a_src(i) + k0;
            if (a_vec) {
                const bool inside = plan.a_row_in(i) && k < K;
                cp_async_16(dst, inside ? src : A, inside ? 16 : 0);
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const bool inside = plan.a_row_in(i) && k + e < K;
                    cp_async_4(dst + 4 * e, inside ? src + e : A, inside ? 4 : 0);
                }
            }
        }
    }
    const size_t b_offset = (size_t)k0 * N;
#pragma unroll
    for (int i = 0; i < B_LOADS; i++) {
        if (B_CHUNKS % THREADS == 0 || threadIdx.x + i * THREADS < B_CHUNKS) {
            const bool row_in = k0 + plan.b_row(i) < K;
            const unsigned dst = b_stage + plan.b_dst(i);
            const float* src = plan.b_src(i) + b_offset;
            if (b_vec) {
                const bool inside = row_in && plan.b_col_end(i) > 0;
                cp_async_16(dst, inside ? src : B, inside ? 16 : 0);
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const bool inside = row_in && e < plan.b_col_end(i);
                    cp_async_4(dst + 4 * e, inside ? src + e : B, inside ? 4 : 0);
                }
            }
        }
    }
}

// Stores C[row][col..col+3], skipping what is outside C.
__device__ __forceinline__ void store_quad(float* __restrict__ C, const int row, const int col,
                                          const int M, const int N, const int quad_ok,
                                          const float4 v) {
    if (row >= M) return;
    float* p = C + row * N + col;
    if (quad_ok) {  // N % 4 == 0 and col % 4 == 0: an aligned float4, all inside or all outside
        if (col < N) *reinterpret_cast<float4*>(p) = v;
    } else {
        if (col < N) p[0] = v.x;
        if (col + 1 < N) p[1] = v.y;
        if (col + 2 < N) p[2] = v.z;
        if (col + 3 < N) p[3] = v.w;
    }
}

// acc += d (rounding FADDs), then d = 0 for the next chunk.
__device__ __forceinline__ void flush_products(float (&acc)[MT][NT][4], float (&d)[MT][NT][4]) {
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                acc[i][j][r] += d[i][j][r];
                d[i][j][r] = 0.0f;
            }
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_11(const int M, const int N, const int K, const float* __restrict__ A,
          const float* __restrict__ B, float* __restrict__ C) {
    // The A and B tiles share one array. With two __shared__ arrays ptxas worked out the
    // second one's shared-window address again in every trip of the k loop (an S2UR of the
    // block's cluster rank and three uniform instructions: the only difference in the loop's
    // SASS), and the kernel ran slower at 4096 (H100, % of cuBLAS SGEMM: 123.6 and 122.9
    // against 126.5 and 127.8 with one array; 8192 unchanged at 130).
    __shared__ __align__(16) float tiles[STAGES * (BM * A_LD + BK * B_LD)];
    float (*As)[BM * A_LD] = reinterpret_cast<float (*)[BM * A_LD]>(tiles);  // [m][k], padded rows
    float (*Bs)[BK * B_LD] =                                                 // [k][n], padded rows
        reinterpret_cast<float (*)[BK * B_LD]>(tiles + STAGES * BM * A_LD);

    const int warp = threadIdx.x / WARP;
    const int lane = threadIdx.x % WARP;
    const int g = lane / 4;  // the fragment layout's groupID
    const int t = lane % 4;  // and threadID_in_group
    const int warp_row = (warp / WARPS_N) * WM;
    const int warp_col = (warp % WARPS_N) * WN;

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
    const int a_vec = (K % 4) == 0;
    const int b_vec = (N % 4) == 0;
#if SPLIT_K > 1
    // Slice blockIdx.z of K: whole tiles, so only the last slice meets K's edge (the guards
    // against K stay as they are); a slice past K (tiny K) computes zeros, and stores them.
    const int slice = (K + BK * SPLIT_K - 1) / (BK * SPLIT_K) * BK;
    const int k_begin = blockIdx.z * slice;
    const int k_length = min(K - k_begin, slice);
    const int num_tiles = k_length > 0 ? (k_length + BK - 1) / BK : 0;
#else
    const int k_begin = 0;
    const int num_tiles = (K + BK - 1) / BK;
#endif

    // d: the products of the current KCHUNK 8-deep steps, accumulated by the tensor cores
    // (small terms first); acc: the sums, added to with a rounding FADD per chunk. The tensor
    // cores truncate the sums they accumulate, so one running sum inside the mma would drift by
    // about K/8 ulps (measured: 25x cuBLAS SGEMM's error at K = 4096); d holds 24 * KCHUNK
    // products, and the FADD rounds to nearest. A longer chunk means fewer FADDs (4 per mma tile
    // per chunk) but d is live across the chunk: another WM*WN/32 registers.
    float acc[MT][NT][4], d[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) acc[i][j][r] = d[i][j][r] = 0.0f;

    const CopyPlan plan = plan_copies(A, B, M, N, K, block_row, block_col);
    const unsigned a_stages = shared_address(As[0]);  // stage s at a_stages + s * A_STAGE_BYTES
    const unsigned b_stages = shared_address(Bs[0]);
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < num_tiles)
            load_tile(plan, a_stages + s * A_STAGE_BYTES, b_stages + s * B_STAGE_BYTES, A, B, N,
                      K, k_begin + s * BK, a_vec, b_vec);
        cp_async_commit();
    }
    int read_stage = 0;             // the stage of tile `tile`
    int write_stage = STAGES - 1;   // the stage of tile `tile + STAGES - 1`

    for (int tile = 0; tile < num_tiles; tile++) {
        cp_async_wait_stages();
        __syncthreads();
        const int next = tile + STAGES - 1;
        if (next < num_tiles)
            load_tile(plan, a_stages + write_stage * A_STAGE_BYTES,
                      b_stages + write_stage * B_STAGE_BYTES, A, B, N, K, k_begin + next * BK,
                      a_vec, b_vec);
        cp_async_commit();
        write_stage = write_stage == STAGES - 1 ? 0 : write_stage + 1;

        // Within each 8-deep step the k order is permuted the same way for A and B (a dot
        // product does not depend on it): the fragments' k = t and k = t + 4 are read from
        // columns (A) or rows (B) 2t and 2t + 1. A lane then reads a0, a2 as one 64-bit LDS and
        // a1, a3 as another. Along n, the mma tiles 2p and 2p + 1 of a warp take the even and
        // odd columns of 16 (tile 2p + q, column g -> warp column 16p + 2g + q), so b0 of both
        // is one 64-bit LDS, and so is b1. A_LD (8 or 24 mod 32) and B_LD (4 mod 32) make
        // every half-warp's 64-bit reads hit 32 distinct banks.
        const float* a_s = As[read_stage] + (warp_row + g) * A_LD + 2 * t;
        const float* b_s = Bs[read_stage] + 2 * t * B_LD + warp_col + 2 * g;
        read_stage = read_stage == STAGES - 1 ? 0 : read_stage + 1;
#pragma unroll
        for (int s = 0; s < STEPS; s++) {
            // B fragments of this 8-deep step for all NT tiles, split once, used MT times.
            unsigned b_big[NT][2], b_small[NT][2];
#pragma unroll
            for (int p = 0; p < NT / 2; p++) {
                const float* q = b_s + 8 * s * B_LD + p * 16;
                const float2 k0 = *reinterpret_cast<const float2*>(q);
                const float2 k4 = *reinterpret_cast<const float2*>(q + B_LD);
                split_tf32(k0.x, b_big[2 * p][0], b_small[2 * p][0]);          // B[t][g], tile 2p
                split_tf32(k0.y, b_big[2 * p + 1][0], b_small[2 * p + 1][0]);  // tile 2p + 1
                split_tf32(k4.x, b_big[2 * p][1], b_small[2 * p][1]);          // B[t+4][g]
                split_tf32(k4.y, b_big[2 * p + 1][1], b_small[2 * p + 1][1]);
            }
#pragma unroll
            for (int i = 0; i < MT; i++) {
                unsigned a_big[4], a_small[4];
                const float* q = a_s + i * 16 * A_LD + 8 * s;
                const float2 top = *reinterpret_cast<const float2*>(q);
                const float2 bottom = *reinterpret_cast<const float2*>(q + 8 * A_LD);
                split_tf32(top.x, a_big[0], a_small[0]);     // A[g][t]
                split_tf32(bottom.x, a_big[1], a_small[1]);  // A[g+8][t]
                split_tf32(top.y, a_big[2], a_small[2]);     // A[g][t+4]
                split_tf32(bottom.y, a_big[3], a_small[3]);  // A[g+8][t+4]
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    mma_tf32(d[i][j], a_big, b_small[j]);
                    mma_tf32(d[i][j], a_small, b_big[j]);
                    mma_tf32(d[i][j], a_big, b_big[j]);
                }
            }
            if (KCHUNK <= STEPS && (s + 1) % KCHUNK == 0) flush_products(acc, d);
        }
        if (KCHUNK > STEPS && (tile + 1) % TILES_PER_CHUNK == 0) flush_products(acc, d);
    }
    if (KCHUNK > STEPS) flush_products(acc, d);  // the last, partial chunk (zeros otherwise)

    // Tiles 2p and 2p + 1 hold, for rows g and g + 8, warp columns 16p + 4t .. 16p + 4t + 3
    // (c0 of tile 2p, c0 of tile 2p + 1, c1 of 2p, c1 of 2p + 1; c2, c3 likewise for row g + 8).
    const int quad_ok = (N % 4) == 0;
#if SPLIT_K > 1
    C += (size_t)blockIdx.z * M * N;  // this slice's partial C; sum_slices adds them up
#endif
#pragma unroll
    for (int i = 0; i < MT; i++) {
        const int row = block_row + warp_row + i * 16 + g;
#pragma unroll
        for (int p = 0; p < NT / 2; p++) {
            const int col = block_col + warp_col + p * 16 + 4 * t;
            const float* even = acc[i][2 * p];
            const float* odd = acc[i][2 * p + 1];
            store_quad(C, row, col, M, N, quad_ok,
                       make_float4(even[0], odd[0], even[1], odd[1]));
            store_quad(C, row + 8, col, M, N, quad_ok,
                       make_float4(even[2], odd[2], even[3], odd[3]));
        }
    }
}

// C = the sum of the SPLIT_K partial products P (SPLIT_K slices of M x N, slice by slice in
// order, so the result does not depend on timing), one element per thread.
extern "C" __global__ void __launch_bounds__(256)
sum_slices(const int M, const int N, const float* __restrict__ P, float* __restrict__ C) {
    const size_t elements = (size_t)M * N;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= elements) return;
    float sum = P[i];
#pragma unroll
    for (int z = 1; z < SPLIT_K; z++) sum += P[z * elements + i];
    C[i] = sum;
}
