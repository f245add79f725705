// matmul_9: warp tiling with large per-work-item tiles and a pre-transposed A;
// C = A * B (row-major; A is MxK, B is KxN, C is MxN).
// Over matmul_8 (two-stage local memory, one barrier per tile, double-buffered register
// fragments, contiguous 8x8 results per work-item):
//  - Warp tiling, as NVIDIA serves local memory per 32-wide warp (work-items 32*w .. 32*w+31
//    of the work-group form warp w): each warp owns a WM x WN sub-tile of the BM x BN tile;
//    its 32 lanes form a (WM/TM) x (WN/TN) grid, and each lane's TM x TN results are
//    (TM/4) x (TN/4) blocks of 4x4 spaced WM/(TM/4) rows and WN/(TN/4) columns apart. At every
//    step k the lanes that differ along N read consecutive float4s of the B row and those along
//    M consecutive float4s of the A^T row (the others get a broadcast), so every fragment read
//    is one conflict-free 128-bit local load.
//  - Large per-work-item tiles like cuBLAS' SIMT kernels: TM and TN go up to 16, e.g. a
//    128x128 tile of 4 warps of 64x64 where each work-item holds 16x8 = 128 accumulators. A
//    step costs (TM+TN)/4 = 6 float4 local loads for 128 FMAs (matmul_8: 4 for 64), and with
//    BK = 16 one barrier serves 2048 FMAs per work-item.
//  - A pre-pass (prepare_operands, below, launched first and timed with the kernel) writes
//    AT = A^T, K rows of LDT = round_up(M, 32) floats (pad columns are zero), into a scratch
//    buffer. Both tiles are then BK rows of contiguous floats whose starts are 16-byte aligned
//    (LDT % 4 == 0), copied as float4s straight into k-major local memory: no transposing
//    scalar stores and no padding. LDT is a multiple of 32 floats, not just 4, so that a
//    warp's 512-byte tile row is 4 whole 128-byte lines at any M (with LDT = round_up(M, 4),
//    4097x4095x4093 spanned 5: H100, CUDA, the kernel without its pre-pass took about 4.7%
//    longer there than at 4096, 2.3% with 32). The pre-pass moves 2*M*K floats (about 1% at 4096). When
//    N % 4 != 0, B's rows are not 16-byte aligned: with PAD_B (the default) the same launch
//    also copies B into BP with rows of round_up(N, 32) floats (2*K*N more floats moved), so B
//    too is read as float4s; PAD_B = 0 reads such a B element by element instead.
//  - Global -> local copies. On NVIDIA GPUs of compute capability 8.0 and newer (the backend
//    defines GEMMLAB_NV_SM there, e.g. 90) they are cp.async through inline PTX, as in
//    matmul_9.cu: 16 bytes straight into local memory (LDGSTS), a STAGES-deep ring, one commit
//    group per tile, so tile t+STAGES-1 is in flight while tile t is computed and prefetching
//    costs no registers. (NVIDIA's OpenCL compiler takes the PTX, and a __local pointer's
//    integer value is its shared-window address, which is what cp.async names.) Elsewhere
//    (PoCL, other GPUs) the next tile is staged in registers: float4 loads issued at the start
//    of a tile and stored to the next stage just before the barrier, matmul_8's double buffer
//    (STAGES is then ignored: always 2). Both paths share the tiles, local layout, loader
//    mapping, fragment scheme, barrier placement and the loop below.
//  - C is written as float4 rows of each 4x4 block.
//  - A lean loader, as in the CUDA source: a work-item's chunks of a tile sit in one column,
//    A_ROWS (B_ROWS) rows apart, and go to local float (tid + i*THREADS)*4, so the loads use
//    one pointer per operand (set up once, advanced BK rows per tile) plus uniform row
//    offsets, column guards fixed per work-item, and row guards (k < K) that only a ragged
//    last tile needs (full tiles skip them). Far fewer integer instructions per tile beside
//    the FMAs than recomputing rows, columns, guards and addresses for every chunk.
//  - A steady loop without branches, as in the CUDA source (with cp.async): every iteration
//    but the last STAGES-1 (all of them when a tile may need guards) issues a whole tile and is
//    followed by another, so it runs a copy of the loop body with no guard and no branch; the
//    rest run the guarded copy. The CUDA source says what the branches cost where the tiles
//    meet. The register-staged path keeps one guarded loop (see the loop).
//  - Grouped work-group order (GROUP): group (x, y) is renumbered so that consecutive
//    work-groups walk down columns of GROUP tile rows, sharing A^T and B panels in L2
//    (GROUP = 1 keeps the row-by-row order).
//  - A_PREPASS = 0 (A read in place by transposing 4-byte copies into swizzled stages) and
//    K_UNROLL < BK (a tile's steps as a loop of chunks) are the CUDA source's measured levers,
//    off by default for the reasons it gives; OpenCL on an H100 measured the same way round.
//
// Loop (one barrier per tile), NSTAGE = STAGES (cp.async) or 2 (registers). Prologue: tile 0
// (cp.async: tiles 0 .. STAGES-2, one commit group each) into its stage, barrier, k = 0
// fragments. Iteration t (stage cur = t % NSTAGE, next = (t+1) % NSTAGE):
//  1. cp.async: issue tile t+STAGES-1 into stage (t-1) % STAGES and commit (an empty group past
//     the end, so group g is always tile g); registers: load tile t+1 into registers;
//  2. steps k = 0 .. BK-2: read the fragments of step k+1, FMA step k;
//  3. step BK-1: cp.async: wait_group(STAGES-2) (this work-item's copies of tile t+1 have
//     landed); registers: store tile t+1 into stage next. Then barrier B(t), read the k = 0
//     fragments of tile t+1 into set 0 (BK is even, so step BK-1 uses set 1), FMA step BK-1.
//  Race-free: the stage written in iteration t (cp.async: (t-1) % STAGES; registers:
//  (t+1) % 2 = (t-1) % 2) is the one tile t-1 was read from, last before B(t-1), which every
//  work-item has passed before anyone reaches iteration t; tile t+1 is read only after B(t),
//  which every work-item reaches after its wait_group or its stores.
//
// Edges (any M, N, K >= 1): the pre-pass guards its reads and writes (pad columns M .. LDT-1
// get zeros); the grid is rounded up to whole tiles (GROUP's renumbering is a permutation of
// the grid, a short last group included). A^T chunks are float4 always (LDT % 4 == 0: a chunk
// is all inside or all outside); a chunk outside AT (row k >= K or column >= LDT) reads
// as zeros. B (or BP, padded by the pre-pass like AT) is read as rows of LDB floats; its
// chunks are one float4 when LDB % 4 == 0, else (PAD_B = 0 and N % 4 != 0) four guarded
// scalars, zero outside B. C is stored as float4s when N % 4 == 0, else as four guarded scalars; rows
// or columns outside C are skipped. These choices are uniform across the kernel, and every
// work-item reaches every barrier (the trip counts depend on K only).

#ifndef BM
#define BM 128  // rows of C per work-group
#endif
#ifndef BN
#define BN 128  // columns of C per work-group
#endif
#ifndef BK
#define BK 16   // depth of the A^T and B tiles staged in local memory per step
#endif
#ifndef WM
#define WM 64   // rows of C per warp
#endif
#ifndef WN
#define WN 64   // columns of C per warp
#endif
#ifndef TM
#define TM 16   // rows of C per work-item: TM/4 blocks of 4 rows
#endif
#ifndef TN
#define TN 8    // columns of C per work-item: TN/4 blocks of 4 columns
#endif
#ifndef STAGES
#define STAGES 3  // local-memory tiles in the cp.async ring (NVIDIA; elsewhere always 2)
#endif
#ifndef GROUP
#define GROUP 8   // tile rows per group of the work-group order (1 = row by row), for L2 reuse
#endif
#ifndef PAD_B
#define PAD_B 1   // N % 4 != 0: the pre-pass copies B into BP with 16-byte aligned rows
#endif
#ifndef OVERLAP
#define OVERLAP 1  // CUDA's launch of the kernel over the pre-pass; an in-order queue has none
#endif
#ifndef A_PREPASS
#define A_PREPASS 1  // 1: the pre-pass writes AT = A^T; 0: the kernel reads A in place
#endif
#ifndef K_UNROLL
#define K_UNROLL 16  // steps of a tile unrolled per loop trip (>= BK: the whole tile)
#endif

#define WARP 32                                 // work-items per warp (NVIDIA)
#define WARPS_N (BN / WN)                       // warps along N
#define THREADS ((BM / WM) * WARPS_N * WARP)    // work-items per work-group
#define LANES_N (WN / TN)                       // lanes of a warp along N
#define SUB_M (TM / 4)                          // 4x4 blocks per work-item along M
#define SUB_N (TN / 4)                          // 4x4 blocks per work-item along N
#define SUB_M_STRIDE (WM / SUB_M)               // rows between a work-item's 4x4 blocks
#define SUB_N_STRIDE (WN / SUB_N)               // columns between a work-item's 4x4 blocks
#define A_F4 (BK * BM / 4)                      // float4 chunks in an A^T tile
#define B_F4 (BK * BN / 4)                      // float4 chunks in a B tile
#define A_LOADS ((A_F4 + THREADS - 1) / THREADS)  // chunks of the A^T tile per work-item
#define B_LOADS ((B_F4 + THREADS - 1) / THREADS)  // chunks of the B tile per work-item
#define A_ROWS (THREADS / (BM / 4))             // A^T tile rows between a work-item's chunks
#define B_ROWS (THREADS / (BN / 4))             // B tile rows between a work-item's chunks
// A read in place (A_PREPASS = 0), as in matmul_9.cu: 8 work-items along k, so a warp reads 4
// rows of 32 contiguous bytes; one pass of the work-group covers A_ROWS_PASS rows of the tile.
#define A_LANES_K 8
#define A_ROWS_PASS (THREADS / A_LANES_K)
#define A_PASSES_M (BM / A_ROWS_PASS)           // passes down the tile's rows
#define A_PASSES_K (BK / A_LANES_K)             // passes along its depth
// Element (m, k) of an in-place tile lands at As[k][m ^ A_SWIZZLE(k)]: bits 2-3 of m flipped
// by k spread a warp's 32 scalar stores over 16 banks instead of 4, and keep each float4 of
// 4 consecutive m whole (fragment reads undo it per lane: matmul_9.cu says why that holds).
#define A_SWIZZLES (A_PREPASS ? 1 : (A_ROWS_PASS >= 16 ? 4 : (A_ROWS_PASS >= 8 ? 2 : 1)))
#define A_SWIZZLE(k) (4 * ((k) % A_SWIZZLES))
// Steps of a tile per unrolled chunk (matmul_9.cu says why): all of them, or K_UNROLL at a time.
#define KU (K_UNROLL < BK ? K_UNROLL : BK)
#if defined(GEMMLAB_NV_SM) && GEMMLAB_NV_SM >= 80
#define CP_ASYNC 1                              // cp.async (sm_80+) through inline PTX
#define NSTAGE STAGES                           // local-memory stages in the ring
#define PHASES 2                                // the tile loop's steady copy, then its guarded one
#else
#define CP_ASYNC 0                              // the next tile staged in registers
#define NSTAGE 2
#define PHASES 1                                // the guarded copy only (see the loop)
#endif

// Pre-pass: AT (K rows of LDT = round_up(M, 32) floats) = A^T, pad columns M .. LDT-1 zero;
// with PAD_B and N % 4 != 0, also BP (K rows of LDB = round_up(N, 32) floats) = B, pad columns
// zero, so that the kernel reads B as float4s too. Work-groups with group id y <
// ceil_div(M, 32) transpose a 32x32 tile of A through local memory, so that the reads (along K)
// and the writes (along M) are both coalesced (the +1 padding puts a tile column in distinct
// banks); those after them copy a 32x32 tile of B, row by row (uniform per work-group). A
// work-group is 32 x 8 work-items, each moving 4 elements. Grid: ceil_div(K, 32) x
// (ceil_div(M, 32) + ceil_div(N, 32) when B is padded, else + 0).
__kernel __attribute__((reqd_work_group_size(32, 8, 1)))
void prepare_operands(const int M, const int N, const int K, const __global float* A,
                      const __global float* B, __global float* AT, __global float* BP) {
    __local float tile[32][33];
    const int tx = get_local_id(0);
    const int ty = get_local_id(1);
    const int k0 = get_group_id(0) * 32;
    const int a_groups = A_PREPASS ? (M + 31) / 32 : 0;  // A in place: only B's tiles launched
    if ((int)get_group_id(1) >= a_groups) {  // a tile of B into BP (launched only when padded)
        const int ldb = (N + 31) & ~31;
        const int n = ((int)get_group_id(1) - a_groups) * 32 + tx;
#pragma unroll
        for (int r = 0; r < 32; r += 8) {
            const int k = k0 + ty + r;
            if (k < K && n < ldb) BP[(size_t)k * ldb + n] = n < N ? B[(size_t)k * N + n] : 0.0f;
        }
        return;
    }
    const int ldt = (M + 31) & ~31;
    const int m0 = get_group_id(1) * 32;
#pragma unroll
    for (int r = 0; r < 32; r += 8) {
        const int m = m0 + ty + r;
        const int k = k0 + tx;
        tile[ty + r][tx] = (m < M && k < K) ? A[m * K + k] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int r = 0; r < 32; r += 8) {
        const int k = k0 + ty + r;
        const int m = m0 + tx;
        if (k < K && m < ldt) AT[(size_t)k * ldt + m] = tile[tx][ty + r];
    }
}

// Stores four consecutive elements (row, col..col+3) of C, skipping those outside it.
inline void store4_guarded(__global float* X, const int row, const int col, const int rows,
                           const int cols, const int vec_ok, const float4 v) {
    if (row < rows) {
        __global float* p = X + row * cols + col;
        if (vec_ok) {
            if (col < cols) *((__global float4*)p) = v;
        } else {
            if (col < cols) p[0] = v.x;
            if (col + 1 < cols) p[1] = v.y;
            if (col + 2 < cols) p[2] = v.z;
            if (col + 3 < cols) p[3] = v.w;
        }
    }
}

#if CP_ASYNC
// 16 bytes global -> local, bypassing L1; src_bytes = 0 reads nothing and writes 16 zeros.
inline void cp_async_16(const uint dst, const __global float* src, const int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// 4 bytes global -> local (.ca: 4-byte copies cannot bypass L1); src_bytes = 0 writes a zero.
inline void cp_async_4(const uint dst, const __global float* src, const int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

inline void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most STAGES-2 of this work-item's commit groups are still in flight.
inline void cp_async_wait_stages(void) {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2) : "memory");
}

#if A_PREPASS
// A^T's float4 chunks of the tile at depth k0 into the stage at a_dst_.
#define ISSUE_A(a_dst_, k0, full_, whole_)                                                        \
    _Pragma("unroll") for (int i_ = 0; i_ < A_LOADS; i_++)                                        \
        if (A_F4 % THREADS == 0 || a_r0 + i_ * A_ROWS < BK) {                                     \
            const int in_ = (full_) || (k0) + a_r0 + i_ * A_ROWS < K;                             \
            cp_async_16(a_dst_ + i_ * THREADS * 16, in_ ? a_src + i_ * a_rows : AT,               \
                        in_ ? a_bytes : 0);                                                       \
        }
#else
// A's elements of the tile at depth k0, 4 bytes each, transposed into the stage at a_dst_;
// guards only in the grid's last tile row or a ragged last tile (both uniform).
#define ISSUE_A(a_dst_, k0, full_, whole_)                                                        \
    if ((whole_) || (a_full_m && (full_))) {                                                      \
        _Pragma("unroll") for (int p_ = 0; p_ < A_PASSES_M; p_++)                                 \
            _Pragma("unroll") for (int q_ = 0; q_ < A_PASSES_K; q_++)                             \
                cp_async_4(a_dst_ + (q_ * A_LANES_K * BM + p_ * A_ROWS_PASS) * 4,                 \
                           a_src + p_ * a_rows + q_ * A_LANES_K, 4);                              \
    } else {                                                                                      \
        _Pragma("unroll") for (int p_ = 0; p_ < A_PASSES_M; p_++)                                 \
            _Pragma("unroll") for (int q_ = 0; q_ < A_PASSES_K; q_++) {                           \
                const int in_ = a_r + p_ * A_ROWS_PASS < a_rows_left                              \
                                && (k0) + a_k + q_ * A_LANES_K < K;                               \
                cp_async_4(a_dst_ + (q_ * A_LANES_K * BM + p_ * A_ROWS_PASS) * 4,                 \
                           in_ ? a_src + p_ * a_rows + q_ * A_LANES_K : A, in_ ? 4 : 0);          \
            }                                                                                     \
    }
#endif

// Issues the copies of the tile at depth k0 into stage s (as matmul_9.cu's issue_tile and, with
// whole_ = 1, issue_whole_tile), then advances the pointers. A tile wholly inside K takes the
// branch without row guards; a chunk outside AT or B gets src-size 0 and a pointer that is
// inside. whole_ (a constant): the tile is whole, B's rows are float4s and A in place is inside
// M, so no guard and no branch is left.
#define ISSUE_TILE(s, k0, whole_)                                                                 \
    do {                                                                                          \
        const uint a_dst_ = a_dst0 + (s) * (BK * BM * 4);                                         \
        const uint b_dst_ = b_dst0 + (s) * (BK * BN * 4);                                         \
        const int full_ = (whole_) || (k0) + BK <= K;  /* uniform */                              \
        ISSUE_A(a_dst_, k0, full_, whole_);                                                       \
        _Pragma("unroll") for (int i_ = 0; i_ < B_LOADS; i_++)                                    \
            if (B_F4 % THREADS == 0 || b_r0 + i_ * B_ROWS < BK) {                                 \
                const int in_ = full_ || (k0) + b_r0 + i_ * B_ROWS < K;                           \
                if ((whole_) || b_vec) {                                                          \
                    cp_async_16(b_dst_ + i_ * THREADS * 16, in_ ? b_src + i_ * b_rows : b_base,   \
                                in_ ? b_bytes : 0);                                               \
                } else {  /* rows not 16-byte aligned: four guarded 4-byte copies */              \
                    _Pragma("unroll") for (int e_ = 0; e_ < 4; e_++) {                            \
                        const int ok_ = in_ && b_c + e_ < ldb;                                    \
                        cp_async_4(b_dst_ + i_ * THREADS * 16 + 4 * e_,                           \
                                   ok_ ? b_src + i_ * b_rows + e_ : b_base, ok_ ? 4 : 0);         \
                    }                                                                             \
                }                                                                                 \
            }                                                                                     \
        a_src += a_step;                                                                          \
        b_src += b_step;                                                                          \
    } while (0)
#endif

#if !CP_ASYNC
#if A_PREPASS
// A^T's float4 chunks of the tile at depth k0 into a_st (zeros outside).
#define LOAD_A(k0, full_)                                                                         \
    _Pragma("unroll") for (int i_ = 0; i_ < A_LOADS; i_++) {                                      \
        a_st[i_] = (float4)(0.0f);                                                                \
        if (A_F4 % THREADS == 0 || a_r0 + i_ * A_ROWS < BK)                                       \
            if (a_in && ((full_) || (k0) + a_r0 + i_ * A_ROWS < K))                               \
                a_st[i_] = *((const __global float4*)(a_src + i_ * a_rows));                      \
    }
// ... stored as float4s at chunk f = tid + i*THREADS of stage s.
#define STORE_A(s)                                                                                \
    _Pragma("unroll") for (int i_ = 0; i_ < A_LOADS; i_++)                                        \
        if (A_F4 % THREADS == 0 || a_r0 + i_ * A_ROWS < BK)                                       \
            *((__local float4*)&As[s][a_r0 + i_ * A_ROWS][a_cl]) = a_st[i_];
#else
// A's elements of the tile at depth k0 into a_st (zeros outside A) ...
#define LOAD_A(k0, full_)                                                                         \
    _Pragma("unroll") for (int p_ = 0; p_ < A_PASSES_M; p_++)                                     \
        _Pragma("unroll") for (int q_ = 0; q_ < A_PASSES_K; q_++) {                               \
            const int in_ = (a_full_m || a_r + p_ * A_ROWS_PASS < a_rows_left)                    \
                            && ((full_) || (k0) + a_k + q_ * A_LANES_K < K);                      \
            a_st[p_ * A_PASSES_K + q_] = in_ ? a_src[p_ * a_rows + q_ * A_LANES_K] : 0.0f;        \
        }
// ... transposed into stage s: row a_r + p*A_ROWS_PASS, depth a_k + q*A_LANES_K, swizzled.
#define STORE_A(s)                                                                                \
    _Pragma("unroll") for (int p_ = 0; p_ < A_PASSES_M; p_++)                                     \
        _Pragma("unroll") for (int q_ = 0; q_ < A_PASSES_K; q_++)                                 \
            As[s][a_k + q_ * A_LANES_K][a_row_sw + p_ * A_ROWS_PASS] = a_st[p_ * A_PASSES_K + q_];
#endif

// Global loads of the tile at depth k0 into a_st[A_LOADS], b_st[B_LOADS] (zeros outside), then
// the pointers advance by BK rows. Chunk i of this work-item is i*A_ROWS (B_ROWS) rows below
// its first; a tile wholly inside K (all but a ragged last one) takes the unguarded branch.
#define LOAD_TILE(k0)                                                                             \
    do {                                                                                          \
        const int full_ = (k0) + BK <= K;  /* uniform */                                          \
        LOAD_A(k0, full_);                                                                        \
        _Pragma("unroll") for (int i_ = 0; i_ < B_LOADS; i_++) {                                  \
            b_st[i_] = (float4)(0.0f);                                                            \
            if (B_F4 % THREADS == 0 || b_r0 + i_ * B_ROWS < BK) {                                 \
                if (full_ || (k0) + b_r0 + i_ * B_ROWS < K) {                                     \
                    const __global float* p_ = b_src + i_ * b_rows;                               \
                    if (b_vec) {                                                                  \
                        if (b_c < ldb) b_st[i_] = *((const __global float4*)p_);                  \
                    } else {                                                                      \
                        if (b_c < ldb) b_st[i_].x = p_[0];                                        \
                        if (b_c + 1 < ldb) b_st[i_].y = p_[1];                                    \
                        if (b_c + 2 < ldb) b_st[i_].z = p_[2];                                    \
                        if (b_c + 3 < ldb) b_st[i_].w = p_[3];                                    \
                    }                                                                             \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
        a_src += a_step;                                                                          \
        b_src += b_step;                                                                          \
    } while (0)

// Stores the staged tile into local stage s: chunk f = tid + i*THREADS at row f / (W/4), column
// (f % (W/4))*4, i.e. float f*4 of the stage (the CUDA cp.async destinations).
#define STORE_TILE(s)                                                                             \
    do {                                                                                          \
        STORE_A(s);                                                                               \
        _Pragma("unroll") for (int i_ = 0; i_ < B_LOADS; i_++)                                    \
            if (B_F4 % THREADS == 0 || b_r0 + i_ * B_ROWS < BK)                                   \
                *((__local float4*)&Bs[s][b_r0 + i_ * B_ROWS][b_cl]) = b_st[i_];         \
    } while (0)

#endif

// Reads the fragments of step kc + kk from local stage s into a_f[TM], b_f[TN]: float4 loads.
// kk is a constant of the unrolled code and kc a multiple of A_SWIZZLES, so kk picks the swizzle.
#define READ_FRAGMENTS(a_f, b_f, s, kc, kk)                                                       \
    do {                                                                                          \
        _Pragma("unroll") for (int i_ = 0; i_ < SUB_M; i_++) {                                    \
            const float4 v_ = *((const __local float4*)&As[s][(kc) + (kk)][a_col[(kk) % A_SWIZZLES] + i_ * SUB_M_STRIDE]); \
            a_f[4 * i_] = v_.x; a_f[4 * i_ + 1] = v_.y; a_f[4 * i_ + 2] = v_.z; a_f[4 * i_ + 3] = v_.w; \
        }                                                                                         \
        _Pragma("unroll") for (int j_ = 0; j_ < SUB_N; j_++) {                                    \
            const float4 v_ = *((const __local float4*)&Bs[s][(kc) + (kk)][n_base + j_ * SUB_N_STRIDE]); \
            b_f[4 * j_] = v_.x; b_f[4 * j_ + 1] = v_.y; b_f[4 * j_ + 2] = v_.z; b_f[4 * j_ + 3] = v_.w; \
        }                                                                                         \
    } while (0)

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void matmul_9(const int M, const int N, const int K, const __global float* A,
              const __global float* AT, const __global float* B, const __global float* BP,
              __global float* C) {
    __local float As[NSTAGE][BK][BM] __attribute__((aligned(16)));  // A^T tiles: [k][m ^ A_SWIZZLE(k)]
    __local float Bs[NSTAGE][BK][BN] __attribute__((aligned(16)));  // B tiles: [k][n]

    const int tid = get_local_id(0);
    const int warp = tid / WARP;
    const int lane = tid % WARP;
    // First row / column of this work-item's first 4x4 block, within the work-group tile.
    const int m_base = (warp / WARPS_N) * WM + (lane / LANES_N) * 4;
    const int n_base = (warp % WARPS_N) * WN + (lane % LANES_N) * 4;

    // Work-group -> tile of C. GROUP > 1: work-groups are numbered down columns of GROUP tile
    // rows, so those resident at once share A^T and B panels in L2 (GROUP = 1: row by row).
#if GROUP == 1
    const int tile_m = get_group_id(1);
    const int tile_n = get_group_id(0);
#else
    int tile_m, tile_n;
    {
        const int pid = get_group_id(1) * get_num_groups(0) + get_group_id(0);
        const int in_group = GROUP * get_num_groups(0);  // work-groups in a group of GROUP rows
        const int first_m = (pid / in_group) * GROUP;
        const int rows = min((int)get_num_groups(1) - first_m, GROUP);  // the last may be short
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
    const __global float* const b_base = b_padded ? BP : B;
    const int b_vec = (ldb % 4) == 0;
    const int c_vec = (N % 4) == 0;  // C's rows: float4 stores
    const int num_tiles = (K + BK - 1) / BK;

    // Loader (as in the CUDA source): chunk i (f = tid + i*THREADS) of a tile is row f / (W/4),
    // column (f % (W/4))*4: this work-item's column, i*A_ROWS (B_ROWS) rows further down. One
    // pointer per operand, clamped to its row start when the column is outside, advances by BK
    // rows per tile.
#if A_PREPASS
    const int a_r0 = tid / (BM / 4);
    const int a_cl = (tid % (BM / 4)) * 4;  // column within the tile
    const int a_c = block_row + a_cl;
    const int a_in = a_c < ldt;
    const __global float* a_src = AT + (size_t)a_r0 * ldt + (a_in ? a_c : 0);
    const size_t a_step = (size_t)BK * ldt;
    const size_t a_rows = (size_t)A_ROWS * ldt;  // floats between chunks i and i+1 of A^T
#else
    // A in place (matmul_9.cu has the layout): this work-item copies depth a_k (+ A_LANES_K * q)
    // of tile rows a_r (+ A_ROWS_PASS * p); rows are guarded only in the grid's last tile row.
    const int a_k = tid % A_LANES_K;
    const int a_r = tid / A_LANES_K;
    const int a_row_sw = a_r ^ A_SWIZZLE(a_k);  // its local row, swizzled
    const int a_rows_left = M - block_row;  // rows of A from the tile's first
    const int a_full_m = a_rows_left >= BM;
    const __global float* a_src = A + (size_t)(block_row + (a_r < a_rows_left ? a_r : 0)) * K + a_k;
    const size_t a_step = BK;
    const size_t a_rows = (size_t)A_ROWS_PASS * K;  // floats between passes p and p+1
#endif
    int a_col[A_SWIZZLES];  // this work-item's first column at steps k with k % A_SWIZZLES == c
#pragma unroll
    for (int c = 0; c < A_SWIZZLES; c++) a_col[c] = m_base ^ A_SWIZZLE(c);
    const int b_r0 = tid / (BN / 4);
    const int b_cl = (tid % (BN / 4)) * 4;
    const int b_c = block_col + b_cl;
    const __global float* b_src = b_base + (size_t)b_r0 * ldb + (b_c < ldb ? b_c : 0);
    const size_t b_step = (size_t)BK * ldb;
    const size_t b_rows = (size_t)B_ROWS * ldb;

#if CP_ASYNC
    // Shared-window addresses of this work-item's first chunk in stage 0 (float tid*4 of a
    // stage); a __local pointer's integer value is that address. Column guards are fixed per
    // work-item: a chunk outside gets src-size 0 (16 zero bytes).
#if A_PREPASS
    const uint a_dst0 = (uint)(size_t)&As[0][0][0] + tid * 16;
    const int a_bytes = a_in ? 16 : 0;
#else
    const uint a_dst0 = (uint)(size_t)&As[0][0][0] + (a_k * BM + a_row_sw) * 4;
#endif
    const uint b_dst0 = (uint)(size_t)&Bs[0][0][0] + tid * 16;
    const int b_bytes = b_c < ldb ? 16 : 0;
#else
#if A_PREPASS
    float4 a_st[A_LOADS];  // the next tile, in flight from global memory
#else
    float a_st[A_PASSES_M * A_PASSES_K];
#endif
    float4 b_st[B_LOADS];
#endif
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;
    float a_frag[2][TM];  // two sets: step k+1 is read while step k is computed
    float b_frag[2][TN];

#if CP_ASYNC
    // Prologue: tiles 0 .. STAGES-2 in flight (one commit group each, empty past the end),
    // wait for tile 0, barrier, its k=0 fragments into set 0.
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < num_tiles) ISSUE_TILE(s, s * BK, 0);
        cp_async_commit();
    }
    cp_async_wait_stages();
#else
    // Prologue: tile 0 into stage 0, then its k=0 fragments into set 0.
    LOAD_TILE(0);
    STORE_TILE(0);
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    READ_FRAGMENTS(a_frag[0], b_frag[0], 0, 0, 0);

    // The tile loop runs in two phases, the steady one first (as in matmul_9.cu). A steady
    // iteration issues a whole tile (whole_ = 1) and is followed by another tile, so its body
    // has no branch at all; the last STAGES-1 iterations (all of them when a tile may need
    // guards: B's 4-byte path, A's last tile row in place) run the guarded body, a ragged last
    // tile among them. The phase loop is unrolled, so `steady` is a constant in each copy. The
    // register-staged path (PHASES = 1) runs the guarded copy only: its devices (CPUs, other
    // GPUs) were not measured to gain from the split, and PoCL took 60 s instead of 7 to
    // compile the kernel with two copies of the unrolled body.
#if A_PREPASS
    const int whole_loads = b_vec;  // the unguarded loader's conditions, uniform
#else
    const int whole_loads = b_vec && a_full_m;
#endif
    // Iterations whose issued tile, t + STAGES - 1, is whole: K / BK - (STAGES - 1) of them.
    const int steady_tiles = PHASES == 2 && whole_loads ? max(K / BK - (NSTAGE - 1), 0) : 0;
    int cur = 0;  // stage of tile t
    int next = NSTAGE > 1 ? 1 : 0;  // stage of tile t+1
#if CP_ASYNC
    int fill = STAGES - 1;  // stage tile t+STAGES-1 goes to: (t-1) % STAGES
#endif
    int t = 0;
#pragma unroll
    for (int phase = 2 - PHASES; phase < 2; phase++) {
        const int steady = phase == 0;
        const int phase_end = steady ? steady_tiles : num_tiles;
        for (; t < phase_end; t++) {
            const int has_next = steady || t + 1 < num_tiles;  // uniform across the work-group
            // 1. Tile t+STAGES-1 (cp.async) or t+1 (registers) in flight while steps 0 .. BK-2
            //    compute; the issue advances a_src, b_src.
#if CP_ASYNC
            if (steady) ISSUE_TILE(fill, (t + STAGES - 1) * BK, 1);
            else if (t + STAGES - 1 < num_tiles) ISSUE_TILE(fill, (t + STAGES - 1) * BK, 0);
            cp_async_commit();  // empty past the end: group g stays tile g
#else
            if (has_next) LOAD_TILE((t + 1) * BK);
#endif

            // 2. Steps k = 0 .. BK-2: read the fragments of step k+1, FMA step k.
            // 3. Step BK-1: tile t+1 lands in stage next, barrier, its k=0 fragments into set 0
            //    (BK is even, so step BK-1 uses set 1), FMA.
            // In chunks of KU unrolled steps; with KU < BK the chunks are trips of a loop that
            // is not unrolled and step BK-1's branch is taken in the last trip only (uniform).
#pragma unroll 1
            for (int kc = 0; kc < BK; kc += KU) {
#pragma unroll
                for (int kk = 0; kk < KU; kk++) {
                    if (kk < KU - 1 || kc + KU < BK) {
                        READ_FRAGMENTS(a_frag[(kk + 1) % 2], b_frag[(kk + 1) % 2], cur, kc, kk + 1);
                    } else if (has_next) {
#if CP_ASYNC
                        cp_async_wait_stages();  // this work-item's copies of tile t+1 have landed
#else
                        STORE_TILE(next);
#endif
                        barrier(CLK_LOCAL_MEM_FENCE);  // B(t): the one barrier per tile
                        READ_FRAGMENTS(a_frag[0], b_frag[0], next, 0, 0);
                    }
#pragma unroll
                    for (int i = 0; i < TM; i++)
#pragma unroll
                        for (int j = 0; j < TN; j++)
                            acc[i][j] = fma(a_frag[kk % 2][i], b_frag[kk % 2][j], acc[i][j]);
                }
            }
#if CP_ASYNC
            fill = cur;
#endif
            cur = next;
            next = next + 1 == NSTAGE ? 0 : next + 1;
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
                               (float4)(acc[4 * i + r][4 * j], acc[4 * i + r][4 * j + 1],
                                        acc[4 * i + r][4 * j + 2], acc[4 * i + r][4 * j + 3]));
            }
}
