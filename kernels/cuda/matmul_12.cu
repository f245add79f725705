// matmul_12: FP32-accurate SGEMM (3xTF32, as matmul_11) on Hopper's warpgroup tensor-core
// instruction, wgmma; C = A * B (row-major; A is MxK, B is KxN, C is MxN). CUDA on sm_90a only.
//
// Over matmul_11 (mma.sync, one warp per 16x8x8 product, 1.26x cuBLAS SGEMM at 4096 on an H100,
// its profile: 128 rounding FADDs and 96 split instructions per 96 mma.sync, two warps a
// scheduler at 255 registers, the tensor pipe 56% busy):
//  - wgmma.mma_async: a warpgroup (4 warps, 128 threads) computes a 64 x BN tile of products
//    from A in registers (4 TF32 values a thread, the same fragment layout as mma.sync's
//    m16n8k8: warp w of the group holds rows 16w..16w+15) and B read by the tensor cores
//    straight from shared memory through a matrix descriptor; it runs asynchronously and
//    keeps the accumulators in the thread's registers. One instruction is 64*BN*8 products
//    (128x one mma.sync at BN = 128), so the issue slots it leaves go to the split and the
//    FADDs.
//  - B is split once, by a pre-pass (split_b, below, launched first and timed with the kernel)
//    into BH (the big TF32 parts) and BL (the remainders), both transposed to [n][k] ("K-major",
//    the only layout wgmma takes for TF32), padded with zeros to NP = round_up(N, BN) rows of
//    KP = round_up(K, BK) floats, so the main kernel copies them with unguarded 16-byte
//    cp.async. It moves 3 * K * N floats (about 4% of the kernel's time at 4096). A is split in
//    registers: each element of an A tile is read by one thread of one warpgroup, once.
//  - The product tile d is summed by the tensor cores over one BK-deep tile (12 wgmma at
//    BK = 32: small terms first), then added to the FP32 accumulator acc with rounding FADDs
//    (matmul_11 explains why the tensor cores' own truncating sums cannot be the accumulator);
//    BN/2 FADDs a thread per tile, a quarter of matmul_11's per product at KCHUNK = 1.
//  - k order: wgmma pairs A's fragment slot c (c = t and t + 4 for lane (g, t)) of 8-deep step
//    s with B's k position 8s + c in the tile. A lane reads the 8 consecutive A elements
//    8t .. 8t+7 of rows g and g + 8 as two float4s and uses elements 2s and 2s+1 in step s;
//    split_b therefore stores at position p = 8s + c of each 32-deep block of a BH/BL row the
//    element of logical k = 8 (c % 4) + 2s + c / 4 (the same sum, in another order).
//  - Shared memory per stage: the A tile ([m][k]) and the BH and BL tiles ([n][k]), rows of
//    BK = 32 floats (128 bytes), in wgmma's 128-byte swizzle: 16-byte chunk c of row r is
//    stored at chunk c ^ (r % 8) of the row. The descriptor names the swizzle, the stride
//    between 8-row groups (1024 bytes) and a start address 32 bytes on per 8-deep step. The
//    8 lanes of a quarter-warp copy one 128-byte row: whole sectors from L2 and 8 distinct
//    bank groups in shared memory, and the A fragment reads (rows g, chunks 2t ^ g) are
//    conflict-free too. The first version used the unswizzled layout (8x4 "core matrices" of
//    16-byte rows), where conflict-free copies meant 8 rows per quarter-warp, 16 bytes each:
//    every copy fetched 32-byte sectors for 16 bytes, L2 ran at 92% of its throughput and the
//    kernel at 55 TFLOPS (4096, H100); swizzled, L2 is at 38% and the kernel at 92 TFLOPS.
//    STAGES * (BM + 2 * BN) * BK * 4 bytes of dynamic shared memory (192 KiB at the defaults,
//    and 1 KiB to put the stages on a 1024-byte boundary), one block of 256 threads an SM.
//  - Grouped block order (GROUP) as in matmul_9.
//
// Pipeline (one barrier per tile), as matmul_11: the prologue issues tiles 0 .. STAGES-2.
// Iteration t: wait_group(STAGES-2) (this thread's copies of tile t landed), fence.proxy.async
// (its cp.async writes, made through the generic proxy, become visible to wgmma's async-proxy
// reads), barrier (everyone's have, and everyone's wgmma of tile t-1 completed: each thread
// waits for its own before the barrier), issue tile t+STAGES-1 into the stage of tile t-1,
// commit; then read and split the A fragments, fence, issue 3 * BK/8 wgmma, commit, wait for
// them, acc += d.
//
// Edges (any M, N, K >= 1): the pre-pass guards its reads and writes zeros outside B; the grid
// is rounded up to whole tiles; A chunks outside A are zero-filled by cp.async's src-size
// operand (16-byte chunks when K % 4 == 0, else 4-byte copies guarded one by one), so a ragged
// tile adds zeros; C is stored as float2 pairs when N is even, else as guarded scalars, and
// elements outside C are skipped. The trip count depends on K only: every thread reaches every
// barrier.

#ifndef BM
#define BM 128  // rows of C per block: one warpgroup of 128 threads per 64 rows
#endif
#ifndef BN
#define BN 128  // columns of C per block: the wgmma's n (64 or 128)
#endif
#ifndef BK
#define BK 32   // depth of a tile (split_b's k permutation works in blocks of 32)
#endif
#ifndef STAGES
#define STAGES 4  // shared-memory tiles in the cp.async ring
#endif
#ifndef GROUP
#define GROUP 8   // tile rows per group of the block order (1 = row by row), for L2 reuse
#endif

#define WARP 32
#define WARPGROUP 128
#define THREADS ((BM / 64) * WARPGROUP)
#define ACC (BN / 2)                          // FP32 values of a 64 x BN tile a thread holds
#define STEPS (BK / 8)                        // 8-deep wgmma steps per tile
#define ROW_BYTES (BK * 4)                    // a tile row (one m of A, one n of BH/BL): 128
#define A_STAGE_FLOATS (BM * BK)
#define B_STAGE_FLOATS (BN * BK)              // one of the BH and BL tiles
#define STAGE_FLOATS (A_STAGE_FLOATS + 2 * B_STAGE_FLOATS)
#define A_LOADS (BM * BK / 4 / THREADS)       // 16-byte chunks of an A tile per thread
#define B_LOADS (BN * BK / 4 / THREADS)       // of a BH (and of a BL) tile
#define STRIDE_BYTES (8 * ROW_BYTES)          // descriptor: from rows n .. n+7 to n+8 .. n+15
#define STEP_BYTES 32                         // descriptor: from k step s to s + 1 (8 floats)
#define ALIGN_BYTES 1024                      // the 128-byte swizzle repeats every 8 rows

__device__ __forceinline__ unsigned shared_address(const void* p) {
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

// Waits until at most STAGES-2 of this thread's commit groups are still in flight, then makes
// what its copies wrote visible to the async proxy (wgmma's shared-memory reads).
__device__ __forceinline__ void cp_async_wait_stages() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2) : "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// x = big + small, as matmul_11: big is x rounded to TF32 (11 significant bits, half away from
// zero) by two integer instructions, small = x - big is exact and passed as it is (the tensor
// core reads its top 11 bits).
__device__ __forceinline__ void split_tf32(const float x, unsigned& big, unsigned& small) {
    big = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    small = __float_as_uint(x - __uint_as_float(big));
}

// Byte offset of 16-byte chunk `chunk` (0..7) of tile row `row` under the 128-byte swizzle:
// rows of 128 bytes, chunk c of row r stored at chunk c ^ (r % 8) of that row.
__device__ __forceinline__ unsigned swizzled(const int row, const int chunk) {
    return (unsigned)(row * ROW_BYTES + ((chunk ^ (row & 7)) << 4));
}

// wgmma's shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"), K-major with
// the 128-byte swizzle: start address and stride byte offset (8 rows) in 16-byte units, the
// leading byte offset unused (1) as a tile row is one swizzle row, layout type 1 (bits 62-63).
// The swizzle works on address bits, so a k step inside a row is a start address 32 bytes on,
// with the tile based on a 1024-byte boundary.
__device__ __forceinline__ unsigned long long matrix_descriptor(const unsigned address) {
    return (unsigned long long)((address & 0x3FFFF) >> 4)
         | (1ull << 16)
         | ((unsigned long long)(STRIDE_BYTES >> 4) << 32)
         | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_wait_all() {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

// Ties a register to this point of the program: the compiler may not move its reads or writes
// across (the wgmma writes d asynchronously; its reads must stay after the wait).
__device__ __forceinline__ void hold_register(float& x) {
    asm volatile("" : "+f"(x) :: "memory");
}

// d (+)= a * B for a 64x64 tile: d holds 32 FP32 values a thread, a 4 TF32 values, B by descriptor.
__device__ __forceinline__ void wgmma_64(float* d, const unsigned* a, const unsigned long long b_desc,
                                          const int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %36, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %37, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(accumulate), "l"(b_desc));
}

// d (+)= a * B for a 64x128 tile: d holds 64 FP32 values a thread, a 4 TF32 values, B by descriptor.
__device__ __forceinline__ void wgmma_128(float* d, const unsigned* a, const unsigned long long b_desc,
                                          const int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %68, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %69, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(accumulate), "l"(b_desc));
}

#if BN == 128
#define WGMMA wgmma_128
#else
#define WGMMA wgmma_64
#endif

// B (K x N) -> BH, BL (NP x KP, [n][k]): the big and small TF32 parts of B^T, k permuted within
// each 32-deep block as the main kernel's fragments expect, zeros outside B. A 32 x 32 tile per
// 32 x 8 block: coalesced reads along n, coalesced writes along k, a padded tile between.
extern "C" __global__ void __launch_bounds__(256)
split_b(const int K, const int N, const float* __restrict__ B, float* __restrict__ BH,
        float* __restrict__ BL) {
    __shared__ float tile[32][33];
    const int KP = (K + BK - 1) / BK * BK;
    const int k0 = blockIdx.x * 32;
    const int n0 = blockIdx.y * 32;
    for (int r = threadIdx.y; r < 32; r += 8) {
        const int k = k0 + r;
        const int n = n0 + threadIdx.x;
        tile[r][threadIdx.x] = (k < K && n < N) ? B[(size_t)k * N + n] : 0.0f;
    }
    __syncthreads();
    const int p = threadIdx.x;                 // position 8s + c in the 32-deep block
    const int k_rel = (p % 4) * 8 + 2 * (p / 8) + (p % 8) / 4;
    for (int r = threadIdx.y; r < 32; r += 8) {
        unsigned big, small;
        split_tf32(tile[k_rel][r], big, small);
        const size_t at = (size_t)(n0 + r) * KP + k0 + p;
        BH[at] = __uint_as_float(big);
        BL[at] = __uint_as_float(small);
    }
}

// Stores C[row][col], C[row][col + 1], skipping what is outside C.
__device__ __forceinline__ void store_pair(float* __restrict__ C, const int row, const int col,
                                          const int M, const int N, const int pair_ok,
                                          const float x, const float y) {
    if (row >= M || col >= N) return;
    float* p = C + (size_t)row * N + col;
    if (pair_ok) {  // N even and col even: an aligned float2, all inside or all outside
        *reinterpret_cast<float2*>(p) = make_float2(x, y);
    } else {
        p[0] = x;
        if (col + 1 < N) p[1] = y;
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
matmul_12(const int M, const int N, const int K, const float* __restrict__ A,
          const float* __restrict__ BH, const float* __restrict__ BL, float* __restrict__ C) {
    extern __shared__ __align__(1024) float smem_raw[];  // STAGES x {A, BH, BL tile}, +1 KiB

    const int KP = (K + BK - 1) / BK * BK;
    const int group = threadIdx.x / WARPGROUP;        // warpgroup: rows 64*group .. of the tile
    const int warp = (threadIdx.x % WARPGROUP) / WARP;
    const int lane = threadIdx.x % WARP;
    const int g = lane / 4;
    const int t = lane % 4;

#if GROUP == 1
    const int tile_m = blockIdx.y;
    const int tile_n = blockIdx.x;
#else
    int tile_m, tile_n;
    {
        const int pid = blockIdx.y * gridDim.x + blockIdx.x;
        const int in_group = GROUP * gridDim.x;
        const int first_m = (pid / in_group) * GROUP;
        const int rows = min((int)gridDim.y - first_m, GROUP);
        const int r = pid - (pid / in_group) * in_group;
        tile_m = first_m + r % rows;
        tile_n = r / rows;
    }
#endif
    const int block_row = tile_m * BM;
    const int block_col = tile_n * BN;
    const int a_vec = (K % 4) == 0;
    const int num_tiles = KP / BK;

    // What this thread copies of every tile, set up once (only the depth changes per tile).
    const float* a_src[A_LOADS];
    unsigned a_dst[A_LOADS];
    int a_col[A_LOADS];
    bool a_row_in[A_LOADS];
#pragma unroll
    for (int i = 0; i < A_LOADS; i++) {
        const int chunk = threadIdx.x + i * THREADS;
        const int row = chunk / (BK / 4);
        const int col = (chunk % (BK / 4)) * 4;
        const int m = block_row + row;
        a_src[i] = A + (size_t)min(m, M - 1) * K + col;
        a_dst[i] = swizzled(row, col / 4);
        a_col[i] = col;
        a_row_in[i] = m < M;
    }
    size_t b_offset[B_LOADS];  // floats into BH and BL at depth 0 (BH, BL are padded: no guards)
    unsigned b_dst[B_LOADS];
#pragma unroll
    for (int i = 0; i < B_LOADS; i++) {
        const int chunk = threadIdx.x + i * THREADS;
        const int n = chunk / (BK / 4);
        const int kc = chunk % (BK / 4);
        b_offset[i] = (size_t)(block_col + n) * KP + kc * 4;
        b_dst[i] = swizzled(n, kc);
    }
    // The stages start on a 1024-byte boundary (the launch asks for 1 KiB more than they need).
    const unsigned raw = shared_address(smem_raw);
    const unsigned stages = (raw + ALIGN_BYTES - 1) & ~(unsigned)(ALIGN_BYTES - 1);
    const float* smem = smem_raw + (stages - raw) / 4;

    auto load_tile = [&](const int stage, const int k0) {
        const unsigned a_stage = stages + stage * STAGE_FLOATS * 4;
        const unsigned bh_stage = a_stage + A_STAGE_FLOATS * 4;
        const unsigned bl_stage = bh_stage + B_STAGE_FLOATS * 4;
#pragma unroll
        for (int i = 0; i < A_LOADS; i++) {
            const int k = k0 + a_col[i];
            const unsigned dst = a_stage + a_dst[i];
            const float* src = a_src[i] + k0;
            if (a_vec) {
                const bool inside = a_row_in[i] && k < K;
                cp_async_16(dst, inside ? src : A, inside ? 16 : 0);
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const bool inside = a_row_in[i] && k + e < K;
                    cp_async_4(dst + 4 * e, inside ? src + e : A, inside ? 4 : 0);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; i++) {
            cp_async_16(bh_stage + b_dst[i], BH + b_offset[i] + k0, 16);
            cp_async_16(bl_stage + b_dst[i], BL + b_offset[i] + k0, 16);
        }
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < num_tiles) load_tile(s, s * BK);
        cp_async_commit();
    }

    // d: the products of one tile, summed by the tensor cores (which truncate); acc: the sums
    // of the tiles, added with rounding FADDs.
    float acc[ACC], d[ACC];
#pragma unroll
    for (int i = 0; i < ACC; i++) acc[i] = d[i] = 0.0f;

    int read_stage = 0;
    int write_stage = STAGES - 1;
    for (int tile = 0; tile < num_tiles; tile++) {
        cp_async_wait_stages();
        __syncthreads();
        const int next = tile + STAGES - 1;
        if (next < num_tiles) load_tile(write_stage, next * BK);
        cp_async_commit();
        write_stage = write_stage == STAGES - 1 ? 0 : write_stage + 1;

        const int a_row = group * 64 + warp * 16 + g;  // and a_row + 8: both g mod 8
        const float* a_s = smem + read_stage * STAGE_FLOATS;
        const unsigned bh_s = stages + (read_stage * STAGE_FLOATS + A_STAGE_FLOATS) * 4;
        const unsigned bl_s = bh_s + B_STAGE_FLOATS * 4;
        read_stage = read_stage == STAGES - 1 ? 0 : read_stage + 1;

        // Rows g and g + 8, elements 8t .. 8t+7: step s uses 2s (slot t) and 2s + 1 (slot t+4).
        float top[BK / 4], bottom[BK / 4];
#pragma unroll
        for (int q = 0; q < BK / 16; q++) {
            const float4 u = *reinterpret_cast<const float4*>(a_s + swizzled(a_row, 2 * t + q) / 4);
            const float4 v = *reinterpret_cast<const float4*>(a_s + swizzled(a_row + 8, 2 * t + q) / 4);
            top[4 * q] = u.x; top[4 * q + 1] = u.y; top[4 * q + 2] = u.z; top[4 * q + 3] = u.w;
            bottom[4 * q] = v.x; bottom[4 * q + 1] = v.y; bottom[4 * q + 2] = v.z;
            bottom[4 * q + 3] = v.w;
        }
        unsigned a_big[STEPS][4], a_small[STEPS][4];
#pragma unroll
        for (int s = 0; s < STEPS; s++) {
            split_tf32(top[2 * s], a_big[s][0], a_small[s][0]);         // A[g][slot t]
            split_tf32(bottom[2 * s], a_big[s][1], a_small[s][1]);      // A[g+8][slot t]
            split_tf32(top[2 * s + 1], a_big[s][2], a_small[s][2]);     // A[g][slot t+4]
            split_tf32(bottom[2 * s + 1], a_big[s][3], a_small[s][3]);  // A[g+8][slot t+4]
        }
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < STEPS; s++) {
            const unsigned long long big = matrix_descriptor(bh_s + s * STEP_BYTES);
            const unsigned long long small = matrix_descriptor(bl_s + s * STEP_BYTES);
            WGMMA(d, a_small[s], big, s > 0);  // the first product of the tile overwrites d
            WGMMA(d, a_big[s], small, 1);
            WGMMA(d, a_big[s], big, 1);
        }
        wgmma_commit();
        wgmma_wait_all();
#pragma unroll
        for (int i = 0; i < ACC; i++) {
            hold_register(d[i]);
            acc[i] += d[i];
        }
    }

    // acc[4j .. 4j+3]: C[row][col], C[row][col+1], C[row+8][col], C[row+8][col+1] with
    // row = 16 warp + g, col = 8j + 2t of the warpgroup's 64 x BN tile.
    const int row = block_row + group * 64 + warp * 16 + g;
    const int pair_ok = (N % 2) == 0;
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int col = block_col + 8 * j + 2 * t;
        store_pair(C, row, col, M, N, pair_ok, acc[4 * j], acc[4 * j + 1]);
        store_pair(C, row + 8, col, M, N, pair_ok, acc[4 * j + 2], acc[4 * j + 3]);
    }
}
