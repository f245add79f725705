// matmul_14: FP32-accurate SGEMM (3xTF32, as matmul_11 and matmul_12) on matmul_13's machinery:
// wgmma fed by the TMA unit, warp-specialised, a persistent grid; C = A * B (row-major; A is
// MxK, B is KxN, C is MxN; FP32 in and out). CUDA on sm_90a only.
//
// Over matmul_12 (3xTF32 on wgmma with a cp.async ring, B split and transposed by a pre-pass:
// 92-95 TFLOPS, 1.75-1.83x cuBLAS SGEMM on an H100) and matmul_13 (one TF32 product per term on
// wgmma fed by TMA, reduced precision): matmul_13's pipeline carrying matmul_12's arithmetic.
//  - As matmul_13: a producer warp issues each stage's copies with cp.async.bulk.tensor through
//    host-encoded tensor maps into a STAGES-deep ring of 128-byte-swizzled tiles; consumer
//    warpgroups (setmaxnreg) compute 64 x BM tiles of the transposed product C^T = B^T * A^T,
//    B^T's fragments loaded by the consumers from the TMA'd B tile into registers (wgmma's
//    register operand), A's tile read by the tensor cores through a descriptor; so no pre-pass
//    transposes B (matmul_12's split_b moved 3 K N floats, about 4% of its time at 4096). They
//    meet at mbarriers; a persistent grid of SMS blocks loops over tiles in grouped order.
//  - 3xTF32 as matmul_12: x = big + small, big = x rounded to TF32, small = x - big (exact);
//    three products per term, small ones first: Bl * Ah and Bh * Al, then Bh * Ah (the
//    Bl * Al term is below FP32's rounding). B's parts are made in registers, where its
//    fragments are anyway (each by cvt.rn; INFLIGHT = 1 keeps cvt.rna, see to_tf32).
//  - A reaches the tensor cores through shared memory, so its parts must be there. Two ways were
//    weighed: a timed pre-pass writing AH and AL (it reads 4 M K bytes and writes 8 M K, about
//    6% of the kernel's time at 4096, and the main loop then copies twice A's bytes by TMA), or
//    splitting A's tile in shared memory after it lands. This step does the second, and not on
//    the consumers (whose issue slots feed the tensor cores) but on the producer warpgroup's
//    three idle warps: the splitter warps wait on full[s], read A's tile as float4s, write the
//    small parts into the stage's AL tile in the same swizzled layout (the split is element by
//    element, so the swizzle carries over), fence.proxy.async (their generic stores become
//    visible to wgmma's async-proxy reads) and arrive on ready[s]; the consumers wait on
//    ready[s]. The ring is TMA -> full[s] -> splitters -> ready[s] -> consumers -> empty[s] ->
//    producer. A's bytes cross L2 once; the split costs shared-memory bandwidth, off the
//    consumers' path, but its latency is on the ring's: ncu (H100, 4096) found the tensor pipe
//    busy 77% of the time against matmul_13's 95%, the consumers waiting on ready[s] while the
//    producer waited on empty[s]. So the splitter loop is unrolled with every guard a constant
//    but the last round's: ptxas then sees the loads of A's tile and the stores into AL apart
//    and issues as many loads ahead as the registers allow (about 4 in the producer's 40; a
//    loop over a count it could not see alternated them, two in flight). H100, one call,
//    alternated twice, TFLOPS, before / after: 4096 120.4, 120.8 / 127.1, 126.9 (2.46-2.48x
//    cuBLAS SGEMM); 8192 110.8, 109.9 / 114.0, 115.2. PRODUCER_REGS = 88 (10 loads ahead, the
//    consumers at 208) measured 123.6 and 123.5 at 4096, 115.4 and 116.3 at 8192, and slower
//    at the odd shapes, so 40 stays.
//  - PRESPLIT = 1 (the default): the timed pre-pass writes A's small parts (as the splitters
//    would, A_ROUND 0) into a scratch matrix ALP, and the producer copies its tile by TMA beside
//    A's into the stage's AL slot; the splitter warps idle and the consumers wait on full[s]
//    only. It reads A and writes M K floats more (at the copy rate about 45 us at 4096; where A
//    is padded anyway, only the writes), and takes the split off the ring's path: H100, alternated twice, ms, 1 / 0 -
//    4097x4095x4093 1.095, 1.097 / 1.158, 1.156; 4096 1.023, 1.014 / 1.034, 1.034; 1000x1030x999
//    0.0396, 0.0401 / 0.0416, 0.0416.
//  - A's big parts (A_ROUND = 0): A's tile as TMA wrote it, which the tensor cores read as TF32
//    by truncation (its top 19 bits), so the small part is x - trunc(x), exact, rounded to TF32
//    by cvt.rn; the splitters then write only AL. A_ROUND = 1 rounds the big parts as for B
//    and writes them over A's tile: one more 16 KiB write a stage, the same error (2.38e-7
//    against 2.38e-7 at 4096) and 2% slower (H100, same call: 4096 116.5 and 118.1 TFLOPS
//    against 120.7 and 119.5): more work for the splitters, whose latency is on the ring's
//    path (above).
//  - Products: per 8-deep step three wgmma into a product tile d, summed by the tensor cores
//    over one BK-deep stage (the first wgmma of the stage overwrites d: scale-d 0), then added
//    to the FP32 accumulators acc with rounding FADDs (the tensor cores' own sums truncate;
//    matmul_11 explains). Two sets of BM / 2 registers a consumer thread: BM = 128 (the
//    m64n128k8 wgmma) with two consumer warpgroups (BN = 128), 232 registers each after
//    setmaxnreg (the producer warpgroup keeps 40, PRODUCER_REGS: its splitters need more than
//    matmul_13's 24).
//    BM = 256 would need 256 registers for d and acc alone.
//  - Each consumer waits for its wgmma every stage (wgmma.wait_group 0, for matmul_13's
//    reason), releases the stage, then adds d to acc while the other consumer's wgmma run.
//    FLUSH = 2 (d summed over two stages, half the FADDs) measured no faster and less accurate
//    (H100: 4096 119.0 TFLOPS against 117.2-118.0, error 3.9e-7 against 2.4e-7; 8192 109.6
//    against 112.3), so d is added every stage.
//  - INFLIGHT = 1 (BM = 128, FLUSH = 1; an option, off, measured slower below): with
//    INFLIGHT = 0 a consumer's tensor-core work stops while it loads and splits the next
//    fragments and adds d to acc, and the two consumers, waiting on the same barriers, tend to
//    do that at the same time, leaving the tensor cores idle. INFLIGHT = 1 computes the
//    64 x 128 product tile as two halves, each its own group of 12 m64n64k8 wgmma (C rows
//    64h .. 64h + 63, d[32h ..]: the same registers, so no more of them), and software-pipelines
//    them over two fragment sets: while stage kt's halves run the consumer loads stage kt + 1's
//    fragments into the other set; once half 0 is done (wgmma.wait_group 1) it adds it and
//    issues stage kt + 1's half 0; once half 1 is done it releases stage kt, adds it and issues
//    stage kt + 1's half 1. So the loads and the FADDs run beside the consumer's own wgmma.
//    One exception: ptxas (sm_90a) serialises every wgmma (C7514) when an accumulator written
//    by a wgmma of an earlier loop trip is read after a wait_group other than 0, so a loop trip
//    takes two stages and ends with nothing running (the second stage's half 1 waited for with
//    wait_group 0): one short drain every two stages. acc, d and two sets fit the 232
//    registers without spills (230 at 128 x 128). Correct, and slower (H100, one call,
//    alternated twice, before the splitter loop above, TFLOPS, INFLIGHT 0 / 1: 4096 117.7,
//    117.3 / 115.8, 115.9; 8192 111.3, 111.0 / 107.2, 107.9 with the SM clock 75 MHz lower):
//    the tensor pipe stayed 77% busy, the consumers were not what held it.
//  - CLUSTER = 2 (the default where the tiles make more than one wave): two blocks of a cluster
//    along n share A's tile, each producer copying half of it into both with a multicast TMA,
//    each consumer warp releasing a stage to both producers (matmul_13's scheme, the last
//    STAGES releases left out so that no block touches a peer that may have finished). A
//    quarter fewer bytes from L2 a stage; at 8192, where the power limit holds the SM clock
//    down, that buys clock (H100, one call, alternated twice, TFLOPS, 1 / 2: 8192 115.6, 117.6
//    / 118.2, 119.3, the median SM clock 1680, 1860 / 1860, 1980 MHz; 4096 124.4, 123.9 /
//    126.1, 125.7; 4097x4095x4093 111.6 / 113.0); at 1000x1030x999 (one wave) 46.2 / 44.6,
//    so a size rule keeps 1 there.
//  - Where it stands (H100, cuBLAS SGEMM in the same run): 4096 123.9-127.1 TFLOPS, 2.38-2.48x;
//    8192 114.0-116.3, 2.21-2.25x (the SM clock at 1815-1845 MHz there, the power limit);
//    4097x4095x4093 111.3-113.9, 2.24-2.34x; 1000x1030x999 44.8-46.1, 1.35-1.38x (72 tiles of
//    128 x 128 on 132 SMs, faster than the 136 to 272 tiles of smaller shapes); error
//    0.19-0.36x cuBLAS SGEMM's. matmul_12: 92.5 (1.78x).
// Shared memory: STAGES x (2 BM + BN) rows of 128 bytes (192 KiB at 128 x 128 x 4 stages), 1 KiB
// to align the stages to the swizzle's 1024 bytes, and the full/ready/empty mbarriers.
//
// Edges (any M, N, K >= 1), as matmul_13: TMA needs 16-byte aligned row strides, so where
// K % 4 != 0 (A) or N % 4 != 0 (B) a pre-pass (pad_operands, timed with the kernel) copies that
// operand into a scratch matrix with rows of round_up(., 4) floats, and its tensor map points
// there; the tensor maps' dims are the logical M, N, K, so the pad columns and everything past
// the edges read as zeros (and split into zeros) and add nothing; the grid is rounded up to
// whole tiles; C is stored as float2 pairs when N is even, else as guarded scalars, and elements
// outside C are skipped. Producer, splitters and consumers walk the same tiles and the same
// K / BK stages of each, so they agree on every phase; a block whose grid slot has no tile does
// nothing.

#ifndef BM
#define BM 128    // rows of C (m) per block: wgmma's n (64 or 128)
#endif
#ifndef BN
#define BN 128    // columns of C (n) per block: 64 per consumer warpgroup (64 or 128)
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
#ifndef A_ROUND
#define A_ROUND 0 // A's big parts: 1 rounded to TF32 and written over A's tile, 0 A's tile as it
#endif            // is, which the tensor cores truncate to TF32 (the small parts then exact)
#ifndef FLUSH
#define FLUSH 1   // stages whose products the tensor cores sum before d is added to acc
#endif
#ifndef PRESPLIT
#define PRESPLIT 1 // 1: A's small parts written by the pre-pass (ALP) and copied by TMA, no splitters
#endif
#ifndef OVERLAP
#define OVERLAP 1 // 1: launched as a programmatic dependent of the pad pre-pass, when there is one
#endif
#ifndef SMS
#define SMS 132     // blocks of the persistent grid (0: one block per tile); the launch's own
#endif              // (the grid is the YAML's): the kernel takes every gridDim.x-th tile
#ifndef INFLIGHT
#define INFLIGHT 0  // 1: the consumer's product tile in two halves, one half's wgmma running
#endif              // while the other half's products are added and the next fragments load
#ifndef PRODUCER_REGS
#define PRODUCER_REGS 40  // registers of the producer warpgroup's threads after setmaxnreg
#endif
#ifndef CLUSTER
#define CLUSTER 2   // blocks of a cluster along n sharing A's tile by TMA multicast (1 or 2)
#endif
#if CLUSTER > 1 && INFLIGHT
#error "CLUSTER = 2 is built for INFLIGHT = 0"
#endif
#if INFLIGHT && (BM != 128 || FLUSH != 1)
#error "INFLIGHT = 1 splits a 128-wide tile into two halves and adds d every stage (FLUSH = 1)"
#endif

#define WARP 32
#define WARPGROUP 128
#define CONSUMERS (BN / 64)                     // consumer warpgroups
#define THREADS ((CONSUMERS + 1) * WARPGROUP)   // and the producer warpgroup
#define SPLITTERS (WARPGROUP - WARP)            // the producer warpgroup's warps 1 .. 3
#define SPLIT_ITEMS (BM * ROW_BYTES / 16)       // float4s of A's tile
#define SPLIT_ROUNDS ((SPLIT_ITEMS + SPLITTERS - 1) / SPLITTERS)  // a splitter's float4s a stage
#define ACC (BM / 2)                            // FP32 values of d (and of acc) a consumer thread holds
#define STEPS (BK / 8)                          // 8-deep wgmma steps per stage
#define ROW_BYTES 128                           // a tile row: 32 floats, the swizzle's width
#define BOX_BYTES (32 * ROW_BYTES)              // a B box: 32 k x 32 n
#define A_STAGE_BYTES (BM * ROW_BYTES)          // A's tile (its big parts after the split), and AL
#define B_STAGE_BYTES (BN * ROW_BYTES)          // BN / 32 boxes
#define STAGE_BYTES (2 * A_STAGE_BYTES + B_STAGE_BYTES)
#define COPY_BYTES ((PRESPLIT ? 2 : 1) * A_STAGE_BYTES + B_STAGE_BYTES)  // what TMA delivers a stage
#define ALIGN_BYTES 1024                        // the 128-byte swizzle repeats every 8 rows
// Registers a thread after setmaxnreg (the block's pool is 65536 / THREADS a thread, 168 with
// two consumer warpgroups): 128 x 40 + 256 x 232 = 64512, or 128 x 88 + 256 x 208 = 64512. With
// 88 a splitter holds 10 of its 11 float4s of a stage at once (one shared-memory round trip),
// with 40 about 4; INFLIGHT 0's consumers need under 168, INFLIGHT 1's 230.
#if PRODUCER_REGS == 88
#define CONSUMER_REGS 208
#elif PRODUCER_REGS == 40
#define CONSUMER_REGS 232
#else
#error "PRODUCER_REGS is 40 or 88"
#endif
#if PRODUCER_REGS > 40 && INFLIGHT
#error "INFLIGHT = 1's consumers need 232 registers, which leaves the producer warpgroup 40"
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

#if CLUSTER > 1
// The same arrival on the barrier at the same offset in block `cta` of the cluster, with the
// default semantics (release at CTA scope), as matmul_13 (which explains why not .cluster).
__device__ __forceinline__ void barrier_arrive_cluster(const unsigned bar, const unsigned cta) {
    asm volatile("{\n.reg .b32 remote;\n"
                 "mapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
                 :: "r"(bar), "r"(cta) : "memory");
}

// A box into shared memory at the same offset in every block of `mask` (the cluster's blocks
// by rank), each completing its bytes on its own barrier at offset `bar`.
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
#endif

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

// This thread's generic-proxy writes to shared memory become visible to the async proxy
// (wgmma's descriptor reads, TMA's writes).
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
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
// across (the wgmma writes d asynchronously; its reads must stay after the wait).
__device__ __forceinline__ void hold_register(float& x) {
    asm volatile("" : "+f"(x) :: "memory");
}

// The same for a fragment register (CUTLASS's warpgroup_fence_operand): a running wgmma reads
// it, so it stays live, unmoved and unreused, up to the wait that retires that wgmma.
__device__ __forceinline__ void hold_register(unsigned& x) {
    asm volatile("" : "+r"(x) :: "memory");
}

// x rounded to TF32 (nearest, ties to even), as a tensor core operand: cvt.rn (sm_90 on) is one
// instruction (F2FP.TF32.F32.PACK_B), where cvt.rna (ties away) is three and matmul_11's integer
// rounding two.
__device__ __forceinline__ unsigned to_tf32(const float x) {
    unsigned y;
#if INFLIGHT  // the option's loop as before cvt.rn, with which ptxas spilled 160 bytes there
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(y) : "f"(x));
#else
    asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(y) : "f"(x));
#endif
    return y;
}

// x = big + small: big is x rounded to TF32 (11 significant bits); small = x - big is exact, and
// is rounded to TF32 in turn (the tensor core would truncate it).
__device__ __forceinline__ void split_tf32(const float x, unsigned& big, unsigned& small) {
#if INFLIGHT
    big = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;  // half away from zero (to_tf32's note)
#else
    big = to_tf32(x);
#endif
    small = to_tf32(x - __uint_as_float(big));
}

// x's remainder under the tensor cores' own truncation to TF32 (the top 19 bits), rounded to TF32.
__device__ __forceinline__ float remainder_tf32(const float x) {
    return __uint_as_float(to_tf32(x - __uint_as_float(__float_as_uint(x) & 0xffffe000u)));
}

__device__ __forceinline__ float4 split_float4(float4& v) {  // v becomes its big parts
    unsigned h0, h1, h2, h3, l0, l1, l2, l3;
    split_tf32(v.x, h0, l0);
    split_tf32(v.y, h1, l1);
    split_tf32(v.z, h2, l2);
    split_tf32(v.w, h3, l3);
    v = make_float4(__uint_as_float(h0), __uint_as_float(h1), __uint_as_float(h2),
                    __uint_as_float(h3));
    return make_float4(__uint_as_float(l0), __uint_as_float(l1), __uint_as_float(l2),
                       __uint_as_float(l3));
}

#if BM == 64 || INFLIGHT
// d (+)= a * B for a 64 x 64 tile: d holds 32 FP32 values a thread, a 4 TF32 values
// (registers), B by descriptor (shared memory); scale_d 0 overwrites d, 1 adds to it.
__device__ __forceinline__ void wgmma_n64(float* d, const unsigned* a,
                                           const unsigned long long b_desc, const int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d));
}
#endif
#if BM == 64
#define WGMMA wgmma_n64
#elif BM == 128
// d (+)= a * B for a 64 x 128 tile: d holds 64 FP32 values a thread, a 4 TF32 values
// (registers), B by descriptor (shared memory); scale_d 0 overwrites d, 1 adds to it.
__device__ __forceinline__ void wgmma_n128(float* d, const unsigned* a,
                                           const unsigned long long b_desc, const int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
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
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d));
}
#define WGMMA wgmma_n128
#endif

// Where a row stride is not a multiple of 16 bytes (TMA's rule): A (M x K) into AP with rows
// of round_up(K, 4) floats when K % 4 != 0, B (K x N) into BP with rows of round_up(N, 4) when
// N % 4 != 0; one block per row, A's rows first, written as float4s (four guarded loads each)
// with zeros in the pad columns, which TMA never reads: the tensor maps end at K and N.
extern "C" __global__ void __launch_bounds__(256)
pad_operands(const int M, const int N, const int K, const float* __restrict__ A,
             const float* __restrict__ B, float* __restrict__ AP, float* __restrict__ BP,
             float* __restrict__ ALP) {
    const int a_rows = (K % 4) != 0 || PRESPLIT ? M : 0;
    int row = blockIdx.x;
    const float* src;
    float* dst;
    int cols;
    if (row < a_rows) {
        src = A + (size_t)row * K;
        dst = AP + (size_t)row * ((K + 3) & ~3);
        cols = K;
#if PRESPLIT  // A's small parts (as the splitters make them) into ALP; AP only where K % 4 != 0
        float4* const al4 = reinterpret_cast<float4*>(ALP + (size_t)row * ((K + 3) & ~3));
        for (int q = threadIdx.x; q < (K + 3) / 4; q += blockDim.x) {
            const int c = 4 * q;
            const float4 v = make_float4(src[c], c + 1 < K ? src[c + 1] : 0.0f,
                                         c + 2 < K ? src[c + 2] : 0.0f, c + 3 < K ? src[c + 3] : 0.0f);
            al4[q] = make_float4(remainder_tf32(v.x), remainder_tf32(v.y), remainder_tf32(v.z),
                                 remainder_tf32(v.w));
            if (K % 4 != 0) reinterpret_cast<float4*>(dst)[q] = v;
        }
        cols = 0;  // done
#endif
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
#if OVERLAP
    // The kernel launches once every block of this grid is past this point (as matmul_9's
    // pre-pass: at the start, the kernel's blocks would take SMs this grid still needs).
    asm volatile("griddepcontrol.launch_dependents;");
#endif
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
matmul_14(const int M, const int N, const int K, const __grid_constant__ TensorMap a_map,
          const __grid_constant__ TensorMap b_map, const __grid_constant__ TensorMap al_map,
          float* __restrict__ C) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];  // stages, +1 KiB, barriers

    const int group = threadIdx.x / WARPGROUP;  // 0: producer and splitters; 1 ..: consumers
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
    // need); the barriers follow them: full[STAGES], ready[STAGES], empty[STAGES]. A stage
    // holds A's tile (its big parts once split), AL (the small parts) and B's tile.
    const unsigned raw = shared_address(smem_raw);
    const unsigned stages = (raw + ALIGN_BYTES - 1) & ~(unsigned)(ALIGN_BYTES - 1);
    const unsigned full = stages + STAGES * STAGE_BYTES;
    const unsigned ready = full + STAGES * 8;
    const unsigned empty = ready + STAGES * 8;
    unsigned char* smem = smem_raw + (stages - raw);

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            barrier_init(full + 8 * s, 1);               // the producer's expect_tx
            barrier_init(ready + 8 * s, SPLITTERS);      // every splitter thread's
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
#if OVERLAP
    // Launched over the pad pre-pass: nothing above reads A or B; wait until the pre-pass has
    // finished and its AP and BP are visible (a no-op when launched without it).
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif

    if (group == 0) {
#if CONSUMERS > 1
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(PRODUCER_REGS));
#endif
        int stage = 0;
        unsigned phase = 0;
        if (warp == 0) {
            if (lane == 0) {  // the producer: A's tile and B's boxes of every stage
                asm volatile("prefetch.tensormap [%0];\n"
                             :: "l"(reinterpret_cast<unsigned long long>(&a_map)) : "memory");
                asm volatile("prefetch.tensormap [%0];\n"
                             :: "l"(reinterpret_cast<unsigned long long>(&b_map)) : "memory");
#if PRESPLIT
                asm volatile("prefetch.tensormap [%0];\n"
                             :: "l"(reinterpret_cast<unsigned long long>(&al_map)) : "memory");
#endif
                for (int unit = first_unit; unit < units; unit += unit_stride) {
                    int block_row, block_col;
                    tile_of(unit, block_row, block_col);
                    for (int kt = 0; kt < num_k; kt++) {
                        barrier_wait(empty + 8 * stage, phase ^ 1);  // the consumers are done
                        const unsigned bar = full + 8 * stage;
                        const unsigned a_dst = stages + stage * STAGE_BYTES;
                        const unsigned b_dst = a_dst + 2 * A_STAGE_BYTES;
                        barrier_expect_bytes(bar, COPY_BYTES);
#if CLUSTER > 1  // this block's BM / CLUSTER rows of A, into every block of the cluster
                        tma_load_multicast(a_dst + rank * (BM / CLUSTER) * ROW_BYTES, &a_map,
                                           kt * BK, block_row + rank * (BM / CLUSTER), bar,
                                           (unsigned short)((1u << CLUSTER) - 1));
#if PRESPLIT
                        tma_load_multicast(a_dst + A_STAGE_BYTES + rank * (BM / CLUSTER) * ROW_BYTES,
                                           &al_map, kt * BK, block_row + rank * (BM / CLUSTER), bar,
                                           (unsigned short)((1u << CLUSTER) - 1));
#endif
#else
                        tma_load(a_dst, &a_map, kt * BK, block_row, bar);  // BM rows of 32 k
#if PRESPLIT
                        tma_load(a_dst + A_STAGE_BYTES, &al_map, kt * BK, block_row, bar);
#endif
#endif
#pragma unroll
                        for (int box = 0; box < BN / 32; box++)           // 32 k rows of 32 n
                            tma_load(b_dst + box * BOX_BYTES, &b_map, block_col + 32 * box,
                                     kt * BK, bar);
                        if (++stage == STAGES) {
                            stage = 0;
                            phase ^= 1;
                        }
                    }
                }
            }
        } else if (!PRESPLIT) {  // the splitters: A's tile into its big (in place) and small (AL) parts
            const int splitter = threadIdx.x - WARP;  // 0 .. SPLITTERS - 1
            for (int unit = first_unit; unit < units; unit += unit_stride) {
                for (int kt = 0; kt < num_k; kt++) {
                    barrier_wait(full + 8 * stage, phase);  // A's tile (and B's) have landed
                    float4* a_tile = reinterpret_cast<float4*>(smem + stage * STAGE_BYTES);
                    float4* al_tile = reinterpret_cast<float4*>(smem + stage * STAGE_BYTES
                                                                + A_STAGE_BYTES);
                    // Unrolled with every guard a constant but the last, partial round's (every
                    // splitter has a float4 in each of the first SPLIT_ITEMS / SPLITTERS
                    // rounds): ptxas then sees the loads' and stores' addresses apart and
                    // issues as many loads ahead as the registers allow.
#pragma unroll
                    for (int round = 0; round < SPLIT_ROUNDS; round++) {
                        const int i = splitter + round * SPLITTERS;
                        if ((round + 1) * SPLITTERS <= SPLIT_ITEMS || i < SPLIT_ITEMS) {
                            float4 v = a_tile[i];
#if A_ROUND
                            const float4 small = split_float4(v);
                            a_tile[i] = v;
                            al_tile[i] = small;
#else
                            al_tile[i] = make_float4(remainder_tf32(v.x), remainder_tf32(v.y),
                                                     remainder_tf32(v.z), remainder_tf32(v.w));
#endif
                        }
                    }
                    fence_proxy_async();               // for wgmma's reads
                    barrier_arrive(ready + 8 * stage);
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
    // A's tile split: by the splitters (ready[s]); with PRESPLIT its small parts came by TMA.
    auto await_split = [&](const int st, const unsigned ph) {
#if !PRESPLIT
        barrier_wait(ready + 8 * st, ph);
#endif
    };
    const int g = lane / 4;
    const int t = lane % 4;
    // This lane's n pair within its warp's 32-n box, as matmul_13: chunk 2p + h + 4q of the
    // 128-byte row (p: the warp's half of the box, h: the half-warp, q and e: bits 1 and 0 of
    // g % 4), float pair e of the chunk; conflict-free under the swizzle's XOR.
    const int box = 2 * consumer + warp / 2;
    const int chunk = 2 * (warp % 2) + (g / 4) + 4 * ((g / 2) % 2);
    const int pair = g % 2;
    const unsigned frag_lo = box * BOX_BYTES + t * ROW_BYTES + ((chunk ^ t) << 4) + 8 * pair;
    const unsigned frag_hi = box * BOX_BYTES + (t + 4) * ROW_BYTES + ((chunk ^ (t + 4)) << 4)
                           + 8 * pair;
    const int n_in_tile = 32 * box + 4 * chunk + 2 * pair;  // wgmma A rows g, g + 8: n, n + 1
    const int pair_ok = (N % 2) == 0;

    // d: the products of one stage, summed by the tensor cores (which truncate); acc: the sums
    // of the stages, added with rounding FADDs.
    float acc[ACC], d[ACC];
#pragma unroll
    for (int i = 0; i < ACC; i++) d[i] = 0.0f;
    int stage = 0;
    unsigned phase = 0;
#if CLUSTER > 1
    int iter = 0;  // the stages this block has consumed
#endif

#if INFLIGHT
    // B^T's fragments of stage `st` (k rows 8s + t and 8s + t + 4 of step s; 8 rows: 1 KiB),
    // split into big and small parts.
    auto load_fragments = [&](unsigned (&big)[STEPS][4], unsigned (&small)[STEPS][4],
                              const int st) {
        const unsigned char* b_stage = smem + st * STAGE_BYTES + 2 * A_STAGE_BYTES;
#pragma unroll
        for (int s = 0; s < STEPS; s++) {
            const float2 lo = *reinterpret_cast<const float2*>(b_stage + frag_lo + s * 8 * ROW_BYTES);
            const float2 hi = *reinterpret_cast<const float2*>(b_stage + frag_hi + s * 8 * ROW_BYTES);
            split_tf32(lo.x, big[s][0], small[s][0]);  // row g (n), slot t
            split_tf32(lo.y, big[s][1], small[s][1]);  // row g + 8 (n + 1), slot t
            split_tf32(hi.x, big[s][2], small[s][2]);  // row g, slot t + 4
            split_tf32(hi.y, big[s][3], small[s][3]);  // row g + 8, slot t + 4
        }
    };
    auto hold_set = [&](unsigned (&big)[STEPS][4], unsigned (&small)[STEPS][4]) {
#pragma unroll
        for (int s = 0; s < STEPS; s++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                hold_register(big[s][e]);
                hold_register(small[s][e]);
            }
    };
    // Half h of stage `st`'s products, one wgmma group: C rows 64h .. 64h + 63, which are A's
    // tile rows from 64h on (8 whole 1024-byte swizzle atoms on, so the swizzle's phase is the
    // same), into d[32h .. 32h + 31]. wgmma's accumulators repeat one pattern per 8 columns
    // (PTX ISA, wgmma's D fragments: d[4j + e] and d[4j + 2 + e] hold column 8j + 2t + e of
    // rows g and g + 8), so m64n64k8's d[4j + i] is C row 64h + 8j + 2t + (i & 1), which
    // m64n128k8 holds in d[32h + 4j + i]: acc and the stores keep their indices. Small terms
    // first, the first overwriting d.
    auto issue_half = [&](unsigned (&big)[STEPS][4], unsigned (&small)[STEPS][4], const int st,
                          const int h) {
        const unsigned ah = stages + st * STAGE_BYTES + h * 64 * ROW_BYTES;
        const unsigned al = ah + A_STAGE_BYTES;
        float* dh = d + 32 * h;
#pragma unroll
        for (int i = 0; i < 32; i++) hold_register(dh[i]);
        hold_set(big, small);
        wgmma_fence();
        wgmma_n64(dh, small[0], matrix_descriptor(ah), 0);
#pragma unroll
        for (int s = 1; s < STEPS; s++)
            wgmma_n64(dh, small[s], matrix_descriptor(ah + s * 32), 1);
#pragma unroll
        for (int s = 0; s < STEPS; s++)
            wgmma_n64(dh, big[s], matrix_descriptor(al + s * 32), 1);
#pragma unroll
        for (int s = 0; s < STEPS; s++)
            wgmma_n64(dh, big[s], matrix_descriptor(ah + s * 32), 1);
        wgmma_commit();
    };
    // After the wait that retired half h: its products into acc (the hold keeps the reads of d
    // after the wait).
    auto add_half = [&](const int h) {
#pragma unroll
        for (int i = 32 * h; i < 32 * h + 32; i++) {
            hold_register(d[i]);
            acc[i] += d[i];
        }
    };
    // This warp is done with stage `st` (both halves' wgmma have been waited for): the producer
    // may refill it.
    auto release = [&](const int st) {
        __syncwarp();
        if (lane == 0) barrier_arrive(empty + 8 * st);
    };
    auto next_stage = [&]() {
        if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
        }
    };
#endif
    for (int unit = first_unit; unit < units; unit += unit_stride) {
        int block_row, block_col;
        tile_of(unit, block_row, block_col);
#pragma unroll
        for (int i = 0; i < ACC; i++) acc[i] = 0.0f;

#if INFLIGHT
        // Two fragment sets: while a stage's halves run, the consumer loads the next stage's
        // fragments into the other set, and adds one half's products to acc while the other
        // half (or the next stage's first half) runs. A loop trip takes two stages, a on set 0
        // and b on set 1, and starts and ends with nothing running: ptxas (sm_90a) serialises
        // every wgmma (C7514) where an accumulator written by a wgmma of an earlier trip is read
        // after a wait_group other than 0, so no group may run across the loop's back edge.
        unsigned big[2][STEPS][4], small[2][STEPS][4];
        barrier_wait(full + 8 * stage, phase);   // B's bytes have landed
        await_split(stage, phase);  // A's tile is split
        load_fragments(big[0], small[0], stage);
        int stage_a = stage;                     // the stage set 0 holds
        next_stage();
        int kt = 0;                              // stage a's k step
        while (true) {
            issue_half(big[0], small[0], stage_a, 0);
            issue_half(big[0], small[0], stage_a, 1);
            if (kt + 1 == num_k) {  // a is the tile's last stage
                wgmma_wait<1>();
                add_half(0);
                wgmma_wait<0>();
                hold_set(big[0], small[0]);
                release(stage_a);
                add_half(1);
                break;
            }
            barrier_wait(full + 8 * stage, phase);
            await_split(stage, phase);
            load_fragments(big[1], small[1], stage);
            const int stage_b = stage;
            next_stage();
            wgmma_wait<1>();  // a's half 0 is done
            add_half(0);
            issue_half(big[1], small[1], stage_b, 0);
            wgmma_wait<1>();  // a's half 1 is done: set 0 and stage a are free
            hold_set(big[0], small[0]);
            release(stage_a);
            add_half(1);
            issue_half(big[1], small[1], stage_b, 1);
            wgmma_wait<1>();  // b's half 0 is done
            add_half(0);
            kt += 2;
            if (kt < num_k) {  // the next trip's stage a into set 0 (after the adds, which
                               // ptxas would otherwise move past the wait below)
                barrier_wait(full + 8 * stage, phase);
                await_split(stage, phase);
                load_fragments(big[0], small[0], stage);
                stage_a = stage;
                next_stage();
            }
            wgmma_wait<0>();  // b's half 1 is done: set 1 and stage b are free
            hold_set(big[1], small[1]);
            release(stage_b);
            add_half(1);
            if (kt == num_k) break;
        }
#else
        for (int kt = 0; kt < num_k; kt++) {
            barrier_wait(full + 8 * stage, phase);   // B's bytes have landed
            await_split(stage, phase);  // A's tile is split
            const unsigned ah_stage = stages + stage * STAGE_BYTES;
            const unsigned al_stage = ah_stage + A_STAGE_BYTES;
            const unsigned char* b_stage = smem + stage * STAGE_BYTES + 2 * A_STAGE_BYTES;
            unsigned big[STEPS][4], small[STEPS][4];
#pragma unroll
            for (int s = 0; s < STEPS; s++) {  // k rows 8s + t and 8s + t + 4 (8 rows: 1 KiB)
                const float2 lo = *reinterpret_cast<const float2*>(b_stage + frag_lo + s * 8 * ROW_BYTES);
                const float2 hi = *reinterpret_cast<const float2*>(b_stage + frag_hi + s * 8 * ROW_BYTES);
                split_tf32(lo.x, big[s][0], small[s][0]);  // row g (n), slot t
                split_tf32(lo.y, big[s][1], small[s][1]);  // row g + 8 (n + 1), slot t
                split_tf32(hi.x, big[s][2], small[s][2]);  // row g, slot t + 4
                split_tf32(hi.y, big[s][3], small[s][3]);  // row g + 8, slot t + 4
            }
            wgmma_fence();
            // Small terms first, so the truncating sums lose least: Bl * Ah and Bh * Al over
            // the stage's four steps, then Bh * Ah; the first overwrites d.
#if FLUSH == 1
            const int fresh = 0;
            const bool flush = true;
#else
            const int fresh = kt % FLUSH;  // 0: the chunk's first stage, which overwrites d
            const bool flush = fresh == FLUSH - 1 || kt == num_k - 1;
#endif
            WGMMA(d, small[0], matrix_descriptor(ah_stage), fresh);
#pragma unroll
            for (int s = 1; s < STEPS; s++)
                WGMMA(d, small[s], matrix_descriptor(ah_stage + s * 32), 1);
#pragma unroll
            for (int s = 0; s < STEPS; s++)
                WGMMA(d, big[s], matrix_descriptor(al_stage + s * 32), 1);
#pragma unroll
            for (int s = 0; s < STEPS; s++)
                WGMMA(d, big[s], matrix_descriptor(ah_stage + s * 32), 1);
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
#if CLUSTER > 1
            iter++;
#endif
            if (++stage == STAGES) {
                stage = 0;
                phase ^= 1;
            }
            if (flush) {
#pragma unroll
                for (int i = 0; i < ACC; i++) {
                    hold_register(d[i]);
                    acc[i] += d[i];
                }
            }
        }
#endif

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
