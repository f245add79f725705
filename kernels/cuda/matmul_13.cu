// matmul_13: TF32 SGEMM on Hopper's wgmma fed by the TMA unit, warp-specialised; C = A * B
// (row-major; A is MxK, B is KxN, C is MxN; FP32 in and out, TF32 products, FP32 sums).
// CUDA on sm_90a only.
//
// Over matmul_12 (3xTF32 on wgmma, 92 TFLOPS at 4096 on an H100) and matmul_10 (plain TF32 on
// mma.sync, 128 TFLOPS there, 32% of cuBLAS TF32): one TF32 product per term as matmul_10 (reduced
// precision, its tolerance), on wgmma as matmul_12, with what a 400-TFLOPS kernel needs beyond
// matmul_12's cp.async ring, where every thread copied and then waited at a block barrier:
//  - TMA (cp.async.bulk.tensor): one thread copies a whole tile with one instruction, described
//    by a tensor map the host encodes (cuTensorMapEncodeTiled; the spec's `tensor_map(...)`
//    argument, a 128-byte `const __grid_constant__` parameter). The unit computes the
//    addresses, writes the tile in the 128-byte swizzle and fills what lies outside the matrix
//    with zeros, so ragged tiles need no guards.
//  - Warp specialisation: warpgroup 0 is the producer (one thread issues the copies, its
//    registers cut to 24 by setmaxnreg), warpgroups 1 .. BN/64 are consumers (raised to 240
//    with two of them) that only load fragments and issue wgmma. They meet at mbarriers, not at
//    block barriers: full[s] completes when stage s's bytes have landed (expect_tx), empty[s]
//    when every consumer warp is done with it; each side waits on the barrier's phase parity.
//  - The transposed product. wgmma reads TF32 operands from shared memory K-major only, and
//    row-major B (k rows of n) is N-major. So each consumer computes a 64 x BM tile of
//    C^T = B^T * A^T: wgmma's A operand (64 x 8, from registers, any layout since threads load
//    it) is B^T, read by the consumer threads from the TMA'd B tile; wgmma's B operand (BM x 8,
//    through a descriptor) is A's tile [m][k] as TMA wrote it - K-major, 128-byte rows of 32
//    k, the 128-byte swizzle wgmma names. No pre-pass transposes B (one would move 2KN more
//    floats, about 12% of the kernel's time at 4096 by the issue's estimate).
//  - Fragment order. Lane (g, t) of warp w holds rows g and g + 8 of wgmma's A for k slots t
//    and t + 4; which n a row stands for is free (the accumulator row is the same n). Rows g and
//    g + 8 take the neighbours n and n + 1, so one 8-byte load gives both, and the n pairs of a
//    half-warp sit in 16-byte chunks c and c + 4 of the 128-byte swizzle row: rows t = 0..3 XOR
//    them to 8 distinct chunks, every fragment load is conflict-free. B is copied as boxes of
//    32 k x 32 n (128-byte rows, the swizzle's width). The B values are rounded to TF32 (cvt.rn)
//    on the way; A's are read by the tensor cores as stored (the top 19 bits).
//  - Accumulators: lane (g, t) holds C^T[n][8j + 2t], [n][8j + 2t + 1] and the same for n + 1,
//    so C is stored as float2 pairs (n, n + 1) of rows 8j + 2t and 8j + 2t + 1: each warp store
//    writes whole 32-byte sectors.
//  - With INFLIGHT = 0 each consumer waits for its products every stage
//    (wgmma.wait_group 0) and then releases the stage; the two consumer warpgroups take turns
//    on the tensor cores, one issuing while the other loads. An earlier attempt at leaving a
//    stage's wgmma running while the next stage's fragments load got wrong results (ptxas
//    reused the running wgmma's fragment registers for the loads; H100, 4096, two consumers)
//    or, with the fragments in registers of their own, every wgmma serialised (C7513).
//    INFLIGHT = 1 (the default) is the register-operand software pipeline (CUTLASS's "RS" mainloop): two
//    fragment sets, the stage loop unrolled by two so that each wgmma names a fixed set. Per
//    stage a consumer issues and commits its group on one set, waits with wgmma.wait_group 1
//    (the previous stage's group, which read the other set, is done), releases the previous
//    stage (the cluster's rule for the last STAGES stages unchanged), then waits on the next
//    stage's full barrier and loads its fragments into the other set while this stage's group
//    runs; at a tile's end wait_group 0 and the last stage's release, then C is stored.
//    Empty asm operand fences (hold_register, CUTLASS's warpgroup_fence_operand) on the
//    accumulators and the fragment sets around issue and wait keep the compiler from moving
//    their reads and writes across the waits or reusing a set before the wait that retires it.
//    ptxas (sm_90a) compiles it without C7513 and without spills for 256 x 128, 192 x 192 (three
//    consumers: registers up to R151 of their 160) and 128 x 64; in the SASS the next stage's
//    LDS sit between one stage's HGMMAs and the WARPGROUP.DEPBAR that retires them, into the
//    other set (256 x 128: sets R152-R167 and R168-R183, accumulators R24-R151). H100, one
//    call, INFLIGHT 0 / 1 alternated: 4096 367.5, 368.0 / 388.5, 390.3 TFLOPS (98.5 and 99.0%
//    of cuBLAS TF32); 8192 (192 x 192) 357.4, 371.6 / 374.3, 366.4, within the noise.
//    With a group in flight, one block nearly keeps an SM's tensor cores busy, so the size
//    rules changed with it: the 192 x 192 rule for large C went (8192, persistent 256 x 128
//    now measures as fast or faster), and where 128 x 64 tiles would make more blocks than
//    SMs (1000 x 1030 x 999: 136), the two blocks sharing an SM took twice as long; 256 x 64
//    tiles, one block an SM, take those shapes (the YAML has the figures).
//  - A persistent grid (SMS = 132, an H100's or H200's SMs): each block loops over tiles, so
//    the producer copies the next tile's stages while the consumers store C, and no block pays
//    the launch and the pipeline's fill again (H200, % of cuBLAS TF32: 4096 94.2 against 93.2
//    with a block per tile, 8192 94.7 against 88.2). On a GPU with fewer SMs the grid still
//    covers every tile, some blocks a round later. The size rules take other shapes where
//    256 x 128 tiles do not fit the problem (the YAML).
//  - Grouped block order (GROUP) as in matmul_9, for L2 reuse of A and B tiles.
//  - CLUSTER = 2 (a size rule takes it from about four waves of tiles): two blocks of a
//    cluster along n share A's tile, each copying half of it to both with a multicast TMA,
//    arriving on both blocks' empty barriers; half of A's L2 traffic, and less energy a
//    product (the YAML's rule has the measurements).
// Shared memory: STAGES x (BM + BN) rows of 128 bytes (192 KiB at 256 x 128 x 4 stages), 1 KiB
// to align the stages to the swizzle's 1024 bytes, and the mbarriers; one block an SM.
//
// Edges (any M, N, K >= 1): TMA needs 16-byte aligned row strides, so where K % 4 != 0 (A) or
// N % 4 != 0 (B) a pre-pass (pad_operands, below, timed with the kernel) copies that operand
// into a scratch matrix with rows of round_up(., 4) floats, and its tensor map points there;
// the tensor maps' dims are the logical M, N, K, so the pad columns and everything past the
// edges read as zeros and add nothing; the grid is rounded up to whole tiles; C is stored as
// float2 pairs when N is even, else as guarded scalars, and elements outside C are skipped.
// Producer and consumers walk the same tiles and the same K / BK stages of each, so they agree
// on every phase; a block whose grid slot has no tile does nothing.

#ifndef BM
#define BM 256    // rows of C (m) per block: wgmma's n (64 .. 256)
#endif
#ifndef BN
#define BN 128    // columns of C (n) per block: 64 per consumer warpgroup (64 .. 192)
#endif
#ifndef BK
#define BK 32     // depth of a stage: one 128-byte swizzle row of floats
#endif
#ifndef STAGES
#define STAGES 4  // shared-memory stages in the TMA ring
#endif
#ifndef GROUP
#define GROUP 8   // tile rows per group of the block order (1 = row by row), for L2 reuse
#endif
#ifndef CLUSTER
#define CLUSTER 1   // blocks of a cluster along n sharing A's tile by TMA multicast (1 or 2)
#endif
#ifndef SMS
#define SMS 132     // blocks of the persistent grid (0: one block per tile); the launch's own
#endif              // (the grid is the YAML's): the kernel takes every gridDim.x-th tile
#ifndef INFLIGHT
#define INFLIGHT 1  // 1: a stage's wgmma group runs while the next stage's fragments load
#endif

#define WARP 32
#define WARPGROUP 128
#define CONSUMERS (BN / 64)                     // consumer warpgroups
#define THREADS ((CONSUMERS + 1) * WARPGROUP)   // and the producer warpgroup
#define ACC (BM / 2)                            // FP32 accumulators a consumer thread holds
#define STEPS (BK / 8)                          // 8-deep wgmma steps per stage
#define ROW_BYTES 128                           // a tile row: 32 floats, the swizzle's width
#define BOX_BYTES (32 * ROW_BYTES)              // a B box: 32 k x 32 n
#define A_STAGE_BYTES (BM * ROW_BYTES)
#define B_STAGE_BYTES (BN * ROW_BYTES)          // BN / 32 boxes
#define STAGE_BYTES (A_STAGE_BYTES + B_STAGE_BYTES)
#define ALIGN_BYTES 1024                        // the 128-byte swizzle repeats every 8 rows
// Registers a thread after setmaxnreg: the producer gives back what the consumers take (the
// block's pool is 65536 / THREADS a thread: 168 with two consumer warpgroups, 128 with three).
#define PRODUCER_REGS 24
#if CONSUMERS == 3
#define CONSUMER_REGS 160
#else
#define CONSUMER_REGS 240
#endif

// A CUtensorMap (cuda.h is a host header): 128 opaque bytes, 64-byte aligned.
struct __align__(64) TensorMap {
    unsigned long long opaque[16];
};

__device__ __forceinline__ unsigned shared_address(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// mbarrier: `count` arrivals (and the expected transaction bytes) complete a phase.
__device__ __forceinline__ void barrier_init(const unsigned bar, const unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}

// The producer's arrival on full[s], announcing the bytes its copies will deliver.
__device__ __forceinline__ void barrier_expect_bytes(const unsigned bar, const unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 :: "r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void barrier_arrive(const unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}

// The same arrival on the barrier at the same offset in block `cta` of the cluster. Its default
// semantics (release at CTA scope), not .release.cluster: that one puts a memory barrier before
// every arrival, and with it (one a stage) the warps stalled on that barrier 38% of the time (ncu,
// H200) and the kernel ran at 60% of its speed without a cluster.
__device__ __forceinline__ void barrier_arrive_cluster(const unsigned bar, const unsigned cta) {
    asm volatile("{\n.reg .b32 remote;\n"
                 "mapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
                 :: "r"(bar), "r"(cta) : "memory");
}

// Waits until the phase of parity `parity` has completed (a fresh barrier counts the phase
// before its first, parity 1, as completed: the producer's first pass over empty[] waits for
// nothing).
__device__ __forceinline__ void barrier_wait(const unsigned bar, const unsigned parity) {
    unsigned done;
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// One box of a 2-D tensor map into shared memory; it completes `bytes` on the barrier.
// x: the column (innermost) coordinate, y: the row.
__device__ __forceinline__ void tma_load(const unsigned dst, const TensorMap* map, const int x,
                                         const int y, const unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y),
                    "r"(bar)
                 : "memory");
}

// The same box into shared memory at the same offset in every block of `mask` (the cluster's
// blocks by rank), each completing its bytes on its own barrier at offset `bar`.
__device__ __forceinline__ void tma_load_multicast(const unsigned dst, const TensorMap* map,
                                                   const int x, const int y, const unsigned bar,
                                                   const unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y),
                    "r"(bar), "h"(mask)
                 : "memory");
}

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}

// wgmma's shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"), K-major with
// the 128-byte swizzle: start address and stride byte offset (8 rows, 1024 bytes) in 16-byte
// units, the leading byte offset unused (1) as a row is one swizzle row, layout type 1 (bits
// 62-63). A k step inside the row is a start address 32 bytes on (as in matmul_12).
__device__ __forceinline__ unsigned long long matrix_descriptor(const unsigned address) {
    return (unsigned long long)((address & 0x3FFFF) >> 4)
         | (1ull << 16)
         | ((unsigned long long)((8 * ROW_BYTES) >> 4) << 32)
         | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void wgmma_wait() {  // until at most N groups are running
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}

// Ties a register to this point of the program: the compiler may not move its reads or writes
// across (the wgmma writes the accumulators asynchronously; reads must stay after the wait).
__device__ __forceinline__ void hold_register(float& x) {
    asm volatile("" : "+f"(x) :: "memory");
}

// The same for a fragment register (CUTLASS's warpgroup_fence_operand): a running wgmma reads
// it, so it stays live, unmoved and unreused, up to the wait that retires that wgmma.
__device__ __forceinline__ void hold_register(unsigned& x) {
    asm volatile("" : "+r"(x) :: "memory");
}

// x rounded to TF32 (nearest, ties to even), as the tensor core's operand. cvt.rn (sm_90 on) is
// one instruction (F2FP.TF32.F32.PACK_B); cvt.rna, ties away, is three there (a finiteness test,
// an add and a mask), a third of the main loop's instructions.
__device__ __forceinline__ unsigned to_tf32(const float x) {
    unsigned y;
    asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(y) : "f"(x));
    return y;
}

#if BM == 64
// d += a * B for a 64 x 64 tile: d holds 32 FP32 values a thread, a 4 TF32 values
// (registers), B by descriptor (shared memory); the sums always accumulate into d.
__device__ __forceinline__ void wgmma_n64(float* d, const unsigned* a,
                                           const unsigned long long b_desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}
#define WGMMA wgmma_n64
#elif BM == 128
// d += a * B for a 64 x 128 tile: d holds 64 FP32 values a thread, a 4 TF32 values
// (registers), B by descriptor (shared memory); the sums always accumulate into d.
__device__ __forceinline__ void wgmma_n128(float* d, const unsigned* a,
                                           const unsigned long long b_desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}
#define WGMMA wgmma_n128
#elif BM == 192
// d += a * B for a 64 x 192 tile: d holds 96 FP32 values a thread, a 4 TF32 values
// (registers), B by descriptor (shared memory); the sums always accumulate into d.
__device__ __forceinline__ void wgmma_n192(float* d, const unsigned* a,
                                           const unsigned long long b_desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k8.f32.tf32.tf32 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
        "}, {%96, %97, %98, %99}, %100, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}
#define WGMMA wgmma_n192
#elif BM == 256
// d += a * B for a 64 x 256 tile: d holds 128 FP32 values a thread, a 4 TF32 values
// (registers), B by descriptor (shared memory); the sums always accumulate into d.
__device__ __forceinline__ void wgmma_n256(float* d, const unsigned* a,
                                           const unsigned long long b_desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, {%128, %129, %130, %131}, %132, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}
#define WGMMA wgmma_n256
#endif

// Where a row stride is not a multiple of 16 bytes (TMA's rule): A (M x K) into AP with rows
// of round_up(K, 4) floats when K % 4 != 0, B (K x N) into BP with rows of round_up(N, 4) when
// N % 4 != 0; one block per row, A's rows first, written as float4s (four guarded loads each)
// with zeros in the pad columns, which TMA never reads: the tensor maps end at K and N.
extern "C" __global__ void __launch_bounds__(256)
pad_operands(const int M, const int N, const int K, const float* __restrict__ A,
             const float* __restrict__ B, float* __restrict__ AP, float* __restrict__ BP) {
    const int a_rows = (K % 4) != 0 ? M : 0;
    int row = blockIdx.x;
    const float* src;
    float* dst;
    int cols;
    if (row < a_rows) {
        src = A + (size_t)row * K;
        dst = AP + (size_t)row * ((K + 3) & ~3);
        cols = K;
    } else {
        row -= a_rows;
        src = B + (size_t)row * N;
        dst = BP + (size_t)row * ((N + 3) & ~3);
        cols = N;
    }
    float4* const dst4 = reinterpret_cast<float4*>(dst);  // rows of 16-byte multiples (TMA's rule)
    for (int q = threadIdx.x; q < (cols + 3) / 4; q += blockDim.x) {
        const int c = 4 * q;
        dst4[q] = make_float4(src[c], c + 1 < cols ? src[c + 1] : 0.0f,
                              c + 2 < cols ? src[c + 2] : 0.0f, c + 3 < cols ? src[c + 3] : 0.0f);
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
#if CLUSTER > 1
__cluster_dims__(CLUSTER, 1, 1)
#endif
matmul_13(const int M, const int N, const int K, const __grid_constant__ TensorMap a_map,
          const __grid_constant__ TensorMap b_map, float* __restrict__ C) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];  // stages, +1 KiB, barriers

    const int group = threadIdx.x / WARPGROUP;  // 0: producer; 1 .. CONSUMERS: consumers
    const int warp = (threadIdx.x % WARPGROUP) / WARP;
    const int lane = threadIdx.x % WARP;
#if CLUSTER > 1
    const unsigned rank = cluster_rank();  // blockIdx.x % CLUSTER: which n tile of the pair
#else
    const unsigned rank = 0;
#endif

    // The tiles of C, in units of a cluster's CLUSTER tiles along n, taken in grouped order
    // (GROUP tile rows at a time); a block (with its cluster) takes every gridDim.x / CLUSTER-th
    // from its own on: one when the grid has a block per tile, several when it is persistent.
    const int tiles_m = (M + BM - 1) / BM;
    const int units_n = ((N + BN - 1) / BN + CLUSTER - 1) / CLUSTER;
    const int units = tiles_m * units_n;
    const int first_unit = blockIdx.x / CLUSTER;
    const int unit_stride = gridDim.x / CLUSTER;
    const int num_k = (K + BK - 1) / BK;
#if CLUSTER > 1  // stages this block (and its cluster) consumes
    const int total_iters = (first_unit < units ? (units - first_unit + unit_stride - 1) / unit_stride
                                                : 0) * num_k;
#endif
    auto tile_of = [&](const int unit, int& block_row, int& block_col) {
#if GROUP == 1
        const int tile_m = unit / units_n;
        const int unit_n = unit % units_n;
#else
        const int in_group = GROUP * units_n;
        const int first_m = (unit / in_group) * GROUP;
        const int rows = min(tiles_m - first_m, GROUP);
        const int r = unit % in_group;
        const int tile_m = first_m + r % rows;
        const int unit_n = r / rows;
#endif
        block_row = tile_m * BM;                          // m
        block_col = (unit_n * CLUSTER + (int)rank) * BN;  // n
    };

    // The stages start on a 1024-byte boundary (the launch asks for 1 KiB more than they
    // need); the barriers follow them: full[STAGES], then empty[STAGES].
    const unsigned raw = shared_address(smem_raw);
    const unsigned stages = (raw + ALIGN_BYTES - 1) & ~(unsigned)(ALIGN_BYTES - 1);
    const unsigned full = stages + STAGES * STAGE_BYTES;
    const unsigned empty = full + STAGES * 8;
    const unsigned char* smem = smem_raw + (stages - raw);

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            barrier_init(full + 8 * s, 1);                         // the producer's expect_tx
            barrier_init(empty + 8 * s, CLUSTER * CONSUMERS * 4);  // every consumer warp's, of
        }                                                           // every block of the cluster
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
#if CLUSTER > 1  // the peer's barriers are ready before anything arrives on them
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
    __syncthreads();
#endif

    if (group == 0) {
#if CONSUMERS > 1
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(PRODUCER_REGS));
#endif
        if (warp == 0 && lane == 0) {
            asm volatile("prefetch.tensormap [%0];\n"
                         :: "l"(reinterpret_cast<unsigned long long>(&a_map)) : "memory");
            asm volatile("prefetch.tensormap [%0];\n"
                         :: "l"(reinterpret_cast<unsigned long long>(&b_map)) : "memory");
            int stage = 0;
            unsigned phase = 0;
            for (int unit = first_unit; unit < units; unit += unit_stride) {
                int block_row, block_col;
                tile_of(unit, block_row, block_col);
                for (int kt = 0; kt < num_k; kt++) {
                    barrier_wait(empty + 8 * stage, phase ^ 1);  // the consumers are done with it
                    const unsigned bar = full + 8 * stage;
                    const unsigned a_dst = stages + stage * STAGE_BYTES;
                    const unsigned b_dst = a_dst + A_STAGE_BYTES;
                    barrier_expect_bytes(bar, STAGE_BYTES);
#if CLUSTER > 1  // this block's BM / CLUSTER rows of A, into every block of the cluster
                    tma_load_multicast(a_dst + rank * (BM / CLUSTER) * ROW_BYTES, &a_map, kt * BK,
                                       block_row + rank * (BM / CLUSTER), bar,
                                       (unsigned short)((1u << CLUSTER) - 1));
#else
                    tma_load(a_dst, &a_map, kt * BK, block_row, bar);    // BM rows of 32 k
#endif
#pragma unroll
                    for (int box = 0; box < BN / 32; box++)              // 32 k rows of 32 n
                        tma_load(b_dst + box * BOX_BYTES, &b_map, block_col + 32 * box, kt * BK,
                                 bar);
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
            }
        }
        return;
    }

#if CONSUMERS > 1
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(CONSUMER_REGS));
#endif
    const int consumer = group - 1;
    const int g = lane / 4;
    const int t = lane % 4;
    // This lane's n pair within its warp's 32-n box: chunk 2p + h + 4q of the 128-byte row
    // (p: the warp's half of the box, h: the half-warp, q and e: bits 1 and 0 of g % 4), float
    // pair e of the chunk. A half-warp's chunks are c and c + 4: conflict-free under the XOR.
    const int box = 2 * consumer + warp / 2;
    const int chunk = 2 * (warp % 2) + (g / 4) + 4 * ((g / 2) % 2);
    const int pair = g % 2;
    const unsigned frag_lo = box * BOX_BYTES + t * ROW_BYTES + ((chunk ^ t) << 4) + 8 * pair;
    const unsigned frag_hi = box * BOX_BYTES + (t + 4) * ROW_BYTES + ((chunk ^ (t + 4)) << 4)
                           + 8 * pair;
    const int n_in_tile = 32 * box + 4 * chunk + 2 * pair;  // wgmma A rows g, g + 8: n, n + 1
    const int pair_ok = (N % 2) == 0;

#if INFLIGHT
    // B^T's fragments of stage `st` (k rows 8s + t and 8s + t + 4 of step s; 8 rows: 1 KiB),
    // rounded to TF32.
    auto load_fragments = [&](unsigned (&frag)[STEPS][4], const int st) {
        const unsigned char* b_stage = smem + st * STAGE_BYTES + A_STAGE_BYTES;
#pragma unroll
        for (int s = 0; s < STEPS; s++) {
            const float2 lo = *reinterpret_cast<const float2*>(b_stage + frag_lo + s * 8 * ROW_BYTES);
            const float2 hi = *reinterpret_cast<const float2*>(b_stage + frag_hi + s * 8 * ROW_BYTES);
            frag[s][0] = to_tf32(lo.x);  // row g (n), slot t
            frag[s][1] = to_tf32(lo.y);  // row g + 8 (n + 1), slot t
            frag[s][2] = to_tf32(hi.x);  // row g, slot t + 4
            frag[s][3] = to_tf32(hi.y);  // row g + 8, slot t + 4
        }
    };
    // This warp is done with stage `st`, the `it`-th this block consumes (its wgmma have been
    // waited for): the producers (of every block of the cluster, which write into this block's
    // stage) may refill it. The last STAGES stages are awaited by no producer, so a cluster's
    // blocks leave those arrivals out: a block never touches a peer that may have finished.
    auto release = [&](const int st, const int it) {
        __syncwarp();
        if (lane == 0) {
#if CLUSTER > 1
            if (it + STAGES < total_iters) {
#pragma unroll
                for (unsigned cta = 0; cta < CLUSTER; cta++)
                    barrier_arrive_cluster(empty + 8 * st, cta);
            }
#else
            (void)it;
            barrier_arrive(empty + 8 * st);
#endif
        }
    };
#endif

    int stage = 0, iter = 0;
    unsigned phase = 0;
    for (int unit = first_unit; unit < units; unit += unit_stride) {
        int block_row, block_col;
        tile_of(unit, block_row, block_col);
        float acc[ACC];
#pragma unroll
        for (int i = 0; i < ACC; i++) acc[i] = 0.0f;

#if INFLIGHT
        // Two fragment sets: stage kt's wgmma group reads set kt % 2 while stage kt + 1's
        // fragments load into the other. Per stage: issue and commit the group, wait until at
        // most it is running (the previous stage's group, which read the other set, is done),
        // release the previous stage, then wait for the next stage and load its fragments.
        // The pair loop is unrolled so the set is a constant (registers, not local memory).
        unsigned frag[2][STEPS][4];
        barrier_wait(full + 8 * stage, phase);
        load_fragments(frag[0], stage);
        int kt = 0, last_stage = stage;
        while (kt < num_k) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const unsigned a_stage = stages + stage * STAGE_BYTES;
#pragma unroll
                for (int i = 0; i < ACC; i++) hold_register(acc[i]);
#pragma unroll
                for (int s = 0; s < STEPS; s++)
#pragma unroll
                    for (int e = 0; e < 4; e++) hold_register(frag[h][s][e]);
                wgmma_fence();
#pragma unroll
                for (int s = 0; s < STEPS; s++)
                    WGMMA(acc, frag[h][s], matrix_descriptor(a_stage + s * 32));
                wgmma_commit();
                wgmma_wait<1>();  // the previous stage's group is done: set h ^ 1 is free
#pragma unroll
                for (int i = 0; i < ACC; i++) hold_register(acc[i]);
#pragma unroll
                for (int s = 0; s < STEPS; s++)
#pragma unroll
                    for (int e = 0; e < 4; e++) hold_register(frag[h ^ 1][s][e]);
                if (kt > 0) release(last_stage, iter - 1);
                last_stage = stage;
                if (++stage == STAGES) {
                    stage = 0;
                    phase ^= 1;
                }
                kt++;
                iter++;
                if (kt == num_k) break;
                barrier_wait(full + 8 * stage, phase);  // the next stage's bytes have landed
                load_fragments(frag[h ^ 1], stage);
            }
        }
        wgmma_wait<0>();  // the tile's last group
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int s = 0; s < STEPS; s++)
#pragma unroll
                for (int e = 0; e < 4; e++) hold_register(frag[h][s][e]);
        release(last_stage, iter - 1);
#else
        for (int kt = 0; kt < num_k; kt++, iter++) {
            barrier_wait(full + 8 * stage, phase);          // this stage's bytes have landed
            const unsigned a_stage = stages + stage * STAGE_BYTES;
            const unsigned char* b_stage = smem + stage * STAGE_BYTES + A_STAGE_BYTES;
            unsigned frag[STEPS][4];
#pragma unroll
            for (int s = 0; s < STEPS; s++) {  // k rows 8s + t and 8s + t + 4 (8 rows: 1 KiB)
                const float2 lo = *reinterpret_cast<const float2*>(b_stage + frag_lo + s * 8 * ROW_BYTES);
                const float2 hi = *reinterpret_cast<const float2*>(b_stage + frag_hi + s * 8 * ROW_BYTES);
                frag[s][0] = to_tf32(lo.x);  // row g (n), slot t
                frag[s][1] = to_tf32(lo.y);  // row g + 8 (n + 1), slot t
                frag[s][2] = to_tf32(hi.x);  // row g, slot t + 4
                frag[s][3] = to_tf32(hi.y);  // row g + 8, slot t + 4
            }
            wgmma_fence();
#pragma unroll
            for (int s = 0; s < STEPS; s++)
                WGMMA(acc, frag[s], matrix_descriptor(a_stage + s * 32));
            wgmma_commit();
            wgmma_wait<0>();
            // This warp is done with the stage: the producers (of every block of the cluster,
            // which write into this block's stage) may refill it. The last STAGES stages are
            // awaited by no producer, so a cluster's blocks leave those arrivals out: a block
            // never touches a peer that may have finished.
            __syncwarp();
            if (lane == 0) {
#if CLUSTER > 1
                if (iter + STAGES < total_iters) {
#pragma unroll
                    for (unsigned cta = 0; cta < CLUSTER; cta++)
                        barrier_arrive_cluster(empty + 8 * stage, cta);
                }
#else
                barrier_arrive(empty + 8 * stage);
#endif
            }
            if (++stage == STAGES) {
                stage = 0;
                phase ^= 1;
            }
        }
#endif
#pragma unroll
        for (int i = 0; i < ACC; i++) hold_register(acc[i]);

        // acc[4j .. 4j+3]: C^T[n][m], C^T[n][m + 1], C^T[n + 1][m], C^T[n + 1][m + 1] with
        // m = 8j + 2t: C rows m and m + 1, columns n and n + 1. (The producer is already
        // copying the next tile's stages meanwhile.)
        const int col = block_col + n_in_tile;
#pragma unroll
        for (int j = 0; j < BM / 8; j++) {
            const int row = block_row + 8 * j + 2 * t;
            store_pair(C, row, col, M, N, pair_ok, acc[4 * j], acc[4 * j + 2]);
            store_pair(C, row + 1, col, M, N, pair_ok, acc[4 * j + 1], acc[4 * j + 3]);
        }
    }
}
