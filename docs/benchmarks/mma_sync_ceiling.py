"""How fast can `mma.sync.aligned.m16n8k8` with TF32 inputs go on this GPU, with nothing else to do?

The ceiling matmul_11 (3xTF32 on `mma.sync`) works under: three products per term, so its
FP32-equivalent rate can be at most a third of what this prints. Each warp runs CHAINS
independent chains of products from registers (no memory, no other instructions), for several
warps per SM; the rate is the median of five launches timed with CUDA events.

    python docs/benchmarks/mma_sync_ceiling.py

needs CuPy and an NVIDIA GPU of compute capability 8.0 or later. The README quotes its output.
"""
import cupy as cp

SOURCE = r"""
extern "C" __global__ void mma_chains(float* out, const int iterations) {
    unsigned a[4], b[2];  // fixed fragments: the tensor cores' rate does not depend on values
    for (int r = 0; r < 4; r++) a[r] = __float_as_uint(1.0f + threadIdx.x * 1e-3f + r);
    for (int r = 0; r < 2; r++) b[r] = __float_as_uint(0.5f + threadIdx.x * 1e-3f + r);
    float d[CHAINS][4];
    for (int c = 0; c < CHAINS; c++)
        for (int r = 0; r < 4; r++) d[c][r] = 0.0f;
    for (int it = 0; it < iterations; it++) {
#pragma unroll
        for (int c = 0; c < CHAINS; c++)
            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                         "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                         : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    float sum = 0.0f;  // stored, so that no product is dead code
    for (int c = 0; c < CHAINS; c++)
        for (int r = 0; r < 4; r++) sum += d[c][r];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
"""
FLOPS_PER_MMA = 2 * 16 * 8 * 8
THREADS = 128  # four warps a block
ITERATIONS = 4096


def median_seconds(kernel, blocks: int, out) -> float:
    launch = lambda: kernel((blocks,), (THREADS,), (out, cp.int32(ITERATIONS)))  # noqa: E731
    launch()  # warm-up (and the module load)
    times = []
    for _ in range(5):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return sorted(times)[len(times) // 2]


def main() -> None:
    device = cp.cuda.Device()
    major, minor = device.compute_capability
    sms = device.attributes["MultiProcessorCount"]
    name = cp.cuda.runtime.getDeviceProperties(device.id)["name"].decode()
    print(f"{name}, {sms} SMs; TF32 TFLOPS of mma.sync m16n8k8 (FP32-equivalent 3xTF32: a third)")
    warps_per_sm = (4, 8, 12, 16, 32)
    print("| chains a warp | " + " | ".join(f"{w} warps/SM" for w in warps_per_sm) + " |")
    print("| --- " * (len(warps_per_sm) + 1) + "|")
    for chains in (1, 2, 4, 8, 16, 32):
        module = cp.RawModule(code=SOURCE,
                              options=(f"-DCHAINS={chains}", f"-arch=sm_{major}{minor}"))
        kernel = module.get_function("mma_chains")
        rates = []
        for warps in warps_per_sm:
            blocks = sms * warps // (THREADS // 32)
            out = cp.empty(blocks * THREADS, cp.float32)
            seconds = median_seconds(kernel, blocks, out)
            mmas = blocks * (THREADS // 32) * ITERATIONS * chains
            rates.append(FLOPS_PER_MMA * mmas / seconds / 1e12)
        print(f"| {chains} | " + " | ".join(f"{rate:.1f}" for rate in rates) + " |", flush=True)


if __name__ == "__main__":
    main()
