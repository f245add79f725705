// matmul_8: data prefetching, C = A * B (row-major; A is MxK, B is KxN, C is MxN).
// Over matmul_7: every pipeline stage is double-buffered, so loads overlap arithmetic.
//  - Two stages of local memory. While the work-group computes on tile t (stage t%2), each
//    work-item has already issued the global loads of tile t+1 into registers; only after its
//    rank-1 updates does it store them to the other stage. Global latency hides behind the
//    arithmetic, and a single barrier per tile is enough (the ordering is argued below).
//  - Two sets of register fragments: the A column and B row for step k+1 are read from local
//    memory while the FMAs of step k run, hiding local-memory latency too.
//  - The A tile is stored transposed, As[k][m], so a work-item's TM values of A at step k are
//    contiguous and are read as float4, like its TN values of B (matmul_7 needs a transposing
//    pre-pass over A for that; here the transpose is four scalar local stores per chunk).
//  - A lean loader. The hot loop is 64*BK FFMAs per tile, so every other instruction costs
//    issue slots; the previous loader recomputed each chunk's row, column, guards and 64-bit
//    address for every tile (about 80 of ~620 instructions per tile at the defaults; now
//    about 45, most of them the 5 stores, the barrier and the loop/stage bookkeeping):
//    * a work-item's chunks of a tile sit in one column, A_ROWS (B_ROWS) rows apart, so each
//      operand has one global pointer, set up once and advanced by BK columns (A) or rows (B)
//      per tile; chunk i adds a fixed offset (B: the work-group-uniform i*B_ROWS*N);
//    * rows of A beyond M and columns of B beyond N are never guarded: the pointers are
//      clamped into the matrix once (A rows to M-1, a B column start beyond N to 0), and what
//      they read only feeds rows / columns of C that are never stored;
//    * a tile wholly inside K, with K % 4 == 0 and N % 4 == 0 (float4 rows), takes an
//      unguarded branch: one float4 load per chunk. A ragged last tile, or unaligned rows,
//      take the guarded branch (k beyond K reads zero; scalar loads when a row stride is not
//      a multiple of 4). The branch is uniform across the work-group;
//    * local destinations and fragment sources are one per-work-item pointer per operand and
//      stage plus compile-time offsets.
//  - LOAD_SPLIT = 2 issues the next tile's global loads in two parts (A chunks first, then B
//    chunks): part 0 at step 0, stored to the other stage at step BK/2, when part 1 is
//    issued; part 1 is stored after step BK-2. Half as many staging registers are live at
//    once, which lets BK = 16 (one barrier per 1024 FFMAs) fit CUDA's 128 registers without
//    spills (LOAD_SPLIT = 1 spills 44 bytes there). Writing the other stage mid-tile is as
//    safe as at its end (see below). At BK = 8 the split only saves 2 registers.
//  Each work-item computes a TM x TN block of C (TM contiguous rows, TN contiguous columns),
//  BM x BN per work-group (the article's bm=bn=128, rm=rn=8 with 256 work-items; its bk=8
//  stays an allowed value, but on an H200 at 4096 BK=16 with LOAD_SPLIT=2 measured faster
//  (CUDA 41.5 against 40.5 TFLOPS, OpenCL 39.5 against 34.8), so BK=16 is the default).
// Edges: k beyond K reads zero (adds nothing); rows of A beyond M and columns of B beyond N
//  read clamped in-bounds data that only reaches unstored results; stores outside C are
//  skipped. Global loads are float4 only when the row stride keeps them 16-byte aligned
//  (K % 4 == 0 for A, N % 4 == 0 for B and for the stores of C), else scalar, each element
//  beyond K (or, for stores, N) skipped; those choices are uniform. Every work-item reaches
//  every barrier (the loop trip count depends on K only).
//
// One barrier per tile is race-free. Iteration t reads stage s = t%2 and writes stage s^1:
//  - the writes of tile t+1 into stage s^1 (all parts, wherever in iteration t they happen)
//    come after this work-item's last read of stage s^1, which was in iteration t-1, before
//    barrier B(t-1); every work-item has passed B(t-1) before anyone writes in iteration t, so
//    nobody still reads what is being overwritten;
//  - the reads of tile t+1 from stage s^1 (the k=0 fragment after B(t), then iteration t+1)
//    come after barrier B(t), which follows all the writes of tile t+1;
//  - stage s is written next in iteration t+1, after B(t), which follows every read of tile t
//    (the last fragment, k=BK-1, is read before B(t); only its FMAs run after it).

#ifndef BM
#define BM 128  // rows of C per work-group
#endif
#ifndef BN
#define BN 128  // columns of C per work-group
#endif
#ifndef BK
#define BK 16   // depth of the A and B tiles staged in local memory per step
#endif
#ifndef TM
#define TM 8    // rows of C per work-item (contiguous)
#endif
#ifndef TN
#define TN 8    // columns of C per work-item (contiguous)
#endif
#ifndef LOAD_SPLIT
#define LOAD_SPLIT 2  // parts the next tile's global loads are issued and stored in (1 or 2)
#endif

#define THREADS_N (BN / TN)                     // work-items along N (dimension 0)
#define THREADS_M (BM / TM)                     // work-items along M (dimension 1)
#define THREADS (THREADS_N * THREADS_M)         // work-items per work-group
#define A_LOADS (BM * BK / (4 * THREADS))       // float4 chunks of the A tile per work-item
#define B_LOADS (BK * BN / (4 * THREADS))       // float4 chunks of the B tile per work-item
#define A_ROWS (THREADS / (BK / 4))             // tile rows between a work-item's A chunks
#define B_ROWS (THREADS / (BN / 4))             // tile rows between a work-item's B chunks
// Chunks are numbered A first, then B; chunk g is issued with part g*LOAD_SPLIT/LOADS, and
// part p is issued at the start of step p*BK/LOAD_SPLIT and stored to local memory at the
// start of the next part (the last part: after step BK-2).
#define LOADS (A_LOADS + B_LOADS)
#define PART_OF(g) ((g) * LOAD_SPLIT / LOADS)
#define PART_STEP(p) ((p) * BK / LOAD_SPLIT)

#define ld4(p) (*((const __global float4*)(p)))  // p is 16-byte aligned wherever it is used

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

// Global loads of part p of tile tl into a_next / b_next. A full tile with float4 rows in both
// operands (tl < fast_tiles) takes the unguarded branch; otherwise (a ragged last tile, or
// K % 4 != 0 or N % 4 != 0) k beyond K reads zero and unaligned rows are read as scalars.
// The branch is uniform across the work-group. Rows of A beyond M and columns of B beyond N need
// no guard: the pointers were clamped inside the matrices, and what they read only feeds rows
// or columns of C that are never stored.
#define LOAD_PART(p, tl)                                                                          \
    do {                                                                                          \
        if ((tl) < fast_tiles) {                                                                  \
            _Pragma("unroll") for (int i_ = 0; i_ < A_LOADS; i_++)                                \
                if (PART_OF(i_) == (p)) a_next[i_] = ld4(a_src + a_off[i_]);                      \
            _Pragma("unroll") for (int i_ = 0; i_ < B_LOADS; i_++)                                \
                if (PART_OF(A_LOADS + i_) == (p)) b_next[i_] = ld4(b_src + i_ * b_rows);          \
        } else if ((tl) < num_tiles) {                                                            \
            const int k0_ = (tl) * BK;                                                            \
            _Pragma("unroll") for (int i_ = 0; i_ < A_LOADS; i_++)                                \
                if (PART_OF(i_) == (p)) {                                                         \
                    const __global float* q_ = a_src + a_off[i_];                                  \
                    const int k_ = k0_ + a_c;                                                     \
                    float4 v_ = (float4)(0.0f);                              \
                    if (a_vec) {                                                                  \
                        if (k_ < K) v_ = ld4(q_);                                                 \
                    } else {                                                                      \
                        if (k_ < K) v_.x = q_[0];                                                 \
                        if (k_ + 1 < K) v_.y = q_[1];                                             \
                        if (k_ + 2 < K) v_.z = q_[2];                                             \
                        if (k_ + 3 < K) v_.w = q_[3];                                             \
                    }                                                                             \
                    a_next[i_] = v_;                                                              \
                }                                                                                 \
            _Pragma("unroll") for (int i_ = 0; i_ < B_LOADS; i_++)                                \
                if (PART_OF(A_LOADS + i_) == (p)) {                                               \
                    const __global float* q_ = b_src + i_ * b_rows;                                \
                    float4 v_ = (float4)(0.0f);                              \
                    if (k0_ + b_r0 + i_ * B_ROWS < K) {                                           \
                        if (b_vec) {                                                              \
                            v_ = ld4(q_);                                                         \
                        } else {                                                                  \
                            if (b_c < N) v_.x = q_[0];                                            \
                            if (b_c + 1 < N) v_.y = q_[1];                                        \
                            if (b_c + 2 < N) v_.z = q_[2];                                        \
                            if (b_c + 3 < N) v_.w = q_[3];                                        \
                        }                                                                         \
                    }                                                                             \
                    b_next[i_] = v_;                                                              \
                }                                                                                 \
        }                                                                                         \
    } while (0)

// Stores part p of the staged tile into the stage whose A and B bases are a_st, b_st: A
// transposed (four scalar stores per chunk), B as one float4 per chunk; constant offsets.
#define STORE_PART(p, a_st, b_st)                                                                 \
    do {                                                                                          \
        _Pragma("unroll") for (int i_ = 0; i_ < A_LOADS; i_++)                                    \
            if (PART_OF(i_) == (p)) {                                                             \
                (a_st)[0 * BM + i_ * A_ROWS] = a_next[i_].x;                                      \
                (a_st)[1 * BM + i_ * A_ROWS] = a_next[i_].y;                                      \
                (a_st)[2 * BM + i_ * A_ROWS] = a_next[i_].z;                                      \
                (a_st)[3 * BM + i_ * A_ROWS] = a_next[i_].w;                                      \
            }                                                                                     \
        _Pragma("unroll") for (int i_ = 0; i_ < B_LOADS; i_++)                                    \
            if (PART_OF(A_LOADS + i_) == (p))                                                     \
                *((__local float4*)((b_st) + i_ * B_ROWS * BN)) = b_next[i_];               \
    } while (0)

// Reads the fragments of step k (A^T row k, B row k of the stage at a_rd, b_rd) into a_f, b_f.
#define READ_FRAGMENTS(a_f, b_f, a_rd, b_rd, k)                                                   \
    do {                                                                                          \
        _Pragma("unroll") for (int i_ = 0; i_ < TM; i_ += 4) {                                    \
            const float4 v_ = *((const __local float4*)((a_rd) + (k) * BM + i_));           \
            a_f[i_] = v_.x; a_f[i_ + 1] = v_.y; a_f[i_ + 2] = v_.z; a_f[i_ + 3] = v_.w;           \
        }                                                                                         \
        _Pragma("unroll") for (int j_ = 0; j_ < TN; j_ += 4) {                                    \
            const float4 v_ = *((const __local float4*)((b_rd) + (k) * BN + j_));           \
            b_f[j_] = v_.x; b_f[j_ + 1] = v_.y; b_f[j_ + 2] = v_.z; b_f[j_ + 3] = v_.w;           \
        }                                                                                         \
    } while (0)

// acc += a_f (column) x b_f (row).
#define FMA_STEP(a_f, b_f)                                                                        \
    do {                                                                                          \
        _Pragma("unroll") for (int i_ = 0; i_ < TM; i_++)                                         \
            _Pragma("unroll") for (int j_ = 0; j_ < TN; j_++)                                     \
                acc[i_][j_] = fma(a_f[i_], b_f[j_], acc[i_][j_]);                                \
    } while (0)

__kernel __attribute__((reqd_work_group_size(THREADS_N, THREADS_M, 1)))
void matmul_8(const int M, const int N, const int K,
              const __global float* A, const __global float* B, __global float* C) {
    __local float As[2][BK][BM] __attribute__((aligned(16)));  // A tile, transposed: [k][m]
    __local float Bs[2][BK][BN] __attribute__((aligned(16)));  // B tile as it is: [k][n]

    const int tx = get_local_id(0);  // column group of this work-item
    const int ty = get_local_id(1);  // row group of this work-item
    const int tid = ty * THREADS_N + tx;
    const int block_row = get_group_id(1) * BM;
    const int block_col = get_group_id(0) * BN;
    const int a_vec = (K % 4) == 0;
    const int b_vec = (N % 4) == 0;
    const int num_tiles = (K + BK - 1) / BK;
    const int fast_tiles = (a_vec && b_vec) ? K / BK : 0;  // tiles wholly inside K, float4 rows

    // Loader, set up once. Chunk i (f = tid + i*THREADS) of the A tile is tile row
    // f / (BK/4) = a_r0 + i*A_ROWS, columns a_c .. a_c+3 (k); of the B tile, row
    // b_r0 + i*B_ROWS, columns b_cl .. b_cl+3. One pointer per operand, advanced by BK columns
    // (A) or rows (B) per tile. A's rows are clamped to M-1 (a_off: chunk i's offset from
    // chunk 0, both clamped); B's column start goes to 0 when it lies beyond N.
    const int a_r0 = tid / (BK / 4);
    const int a_c = (tid % (BK / 4)) * 4;
    const int b_r0 = tid / (BN / 4);
    const int b_cl = (tid % (BN / 4)) * 4;
    const int b_c = block_col + b_cl;
    const int a_row0 = min(block_row + a_r0, M - 1);
    int a_off[A_LOADS];
#pragma unroll
    for (int i = 0; i < A_LOADS; i++)
        a_off[i] = (min(block_row + a_r0 + i * A_ROWS, M - 1) - a_row0) * K;
    const __global float* a_src = A + (size_t)a_row0 * K + a_c;
    const __global float* b_src = B + (size_t)b_r0 * N + (b_c < N ? b_c : 0);
    const size_t b_rows = (size_t)B_ROWS * N;  // floats between a work-item's B chunks
    const size_t b_step = (size_t)BK * N;
    __local float* const a_st0 = &As[0][a_c][a_r0];  // local destinations, stage 0
    __local float* const b_st0 = &Bs[0][b_r0][b_cl];
    const __local float* const a_rd0 = &As[0][0][ty * TM];  // fragment sources, stage 0
    const __local float* const b_rd0 = &Bs[0][0][tx * TN];

    float4 a_next[A_LOADS];  // the next tile, in flight from global memory
    float4 b_next[B_LOADS];
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;
    float a_frag[2][TM];  // two sets: step k+1 is read while step k is computed
    float b_frag[2][TN];

    // Prologue: tile 0 into stage 0, then its k=0 fragments into set 0.
#pragma unroll
    for (int p = 0; p < LOAD_SPLIT; p++) LOAD_PART(p, 0);
#pragma unroll
    for (int p = 0; p < LOAD_SPLIT; p++) STORE_PART(p, a_st0, b_st0);
    a_src += BK;
    b_src += b_step;
    barrier(CLK_LOCAL_MEM_FENCE);
    READ_FRAGMENTS(a_frag[0], b_frag[0], a_rd0, b_rd0, 0);

    for (int t = 0; t < num_tiles; t++) {
        const int cur = t & 1;
        const int has_next = t + 1 < num_tiles;  // uniform across the work-group
        const __local float* const a_rd = a_rd0 + cur * (BK * BM);
        const __local float* const b_rd = b_rd0 + cur * (BK * BN);
        __local float* const a_st = a_st0 + (cur ^ 1) * (BK * BM);  // the other stage
        __local float* const b_st = b_st0 + (cur ^ 1) * (BK * BN);

        // 1. Issue the global loads of (the first part of) tile t+1; they complete while we
        //    compute tile t.
        LOAD_PART(0, t + 1);

        // 2. Steps k = 0 .. BK-2 of tile t: read the fragments of step k+1, then FMA step k.
        //    With LOAD_SPLIT = 2, the first part is stored and the second issued half-way.
#pragma unroll
        for (int k = 0; k < BK - 1; k++) {
#pragma unroll
            for (int p = 1; p < LOAD_SPLIT; p++)
                if (k == PART_STEP(p)) {
                    if (has_next) STORE_PART(p - 1, a_st, b_st);
                    LOAD_PART(p, t + 1);
                }
            READ_FRAGMENTS(a_frag[(k + 1) % 2], b_frag[(k + 1) % 2], a_rd, b_rd, k + 1);
            FMA_STEP(a_frag[k % 2], b_frag[k % 2]);
        }

        // 3. Store (the last part of) tile t+1 into the other stage (nobody reads it any more:
        //    see the header).
        if (has_next) STORE_PART(LOAD_SPLIT - 1, a_st, b_st);
        barrier(CLK_LOCAL_MEM_FENCE);  // the one barrier per tile
        a_src += BK;
        b_src += b_step;

        // 4. Read the k=0 fragments of tile t+1 into set 0 (free: BK is even, so the last
        //    step of tile t uses set 1), then FMA that last step.
        if (has_next) READ_FRAGMENTS(a_frag[0], b_frag[0], a_rd0 + (cur ^ 1) * (BK * BM),
                                     b_rd0 + (cur ^ 1) * (BK * BN), 0);
        FMA_STEP(a_frag[(BK - 1) % 2], b_frag[(BK - 1) % 2]);
    }

    // Epilogue: each row of the TM x TN block as TN/4 float4 stores.
#pragma unroll
    for (int i = 0; i < TM; i++) {
        const int row = block_row + ty * TM + i;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            store4_guarded(C, row, block_col + tx * TN + j, M, N, b_vec,
                           (float4)(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
        }
    }
}
