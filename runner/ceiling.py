"""The arithmetic ceilings of the current NVIDIA GPU, measured: what its FP32 FMA pipe (the SIMT
steps' ceiling), its TF32 tensor cores through `mma.sync` (matmul_10's and matmul_11's
instruction) and, on Hopper, through the warpgroup `wgmma` (matmul_12's and matmul_13's) can do
at most, each by a kernel that does nothing else.

    python -m runner.ceiling                    # CUDA device 0
    python -m runner.ceiling --device 1 --repeats 20
    python -m runner.ceiling --experiment sgemm_ladder --uri sqlite:///sgemm.db   # and record it

Recorded (`--experiment`), the ceilings are a run of that experiment tagged `gemmlab.ceiling`,
and the experiment's report page sets each step against its own ceiling.

A ladder step is bounded by its pipe: an FP32 SIMT SGEMM by the FFMA rate, a TF32 step by the
mma.sync rate, and the FP32-accurate 3xTF32 step (three products per term) by a third of it.
Each kernel runs many independent dependency chains per thread on every SM, with no memory
traffic inside the timed loop; the figure is the median over `--repeats` event-timed launches.
"""

import argparse
import statistics
import sys

import numpy as np

from runner.errors import RunError

CHAINS = 8        # independent accumulators per thread: enough to hide each pipe's latency
FFMA_UNROLL = 16  # loop overhead under 1% of the FFMAs
WGMMA_BATCH = 16  # products a warpgroup chains into one accumulator set between its waits
SOURCE = r"""
#define CHAINS %(chains)d

extern "C" __global__ void ffma_peak(float* out, const int iters, const float y, const float z) {
    float x[CHAINS];
#pragma unroll
    for (int j = 0; j < CHAINS; ++j) x[j] = threadIdx.x * 1e-3f + j;
#pragma unroll %(ffma_unroll)d
    for (int i = 0; i < iters; ++i)
#pragma unroll
        for (int j = 0; j < CHAINS; ++j) x[j] = fmaf(x[j], y, z);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < CHAINS; ++j) sum += x[j];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;  // keeps the chains alive
}

extern "C" __global__ void mma_tf32_peak(float* out, const int iters) {
    unsigned a[4], b[2];
#pragma unroll
    for (int r = 0; r < 4; ++r)
        asm("cvt.rna.tf32.f32 %%0, %%1;" : "=r"(a[r]) : "f"(threadIdx.x * 1e-3f + r));
#pragma unroll
    for (int r = 0; r < 2; ++r)
        asm("cvt.rna.tf32.f32 %%0, %%1;" : "=r"(b[r]) : "f"(1e-3f - threadIdx.x * 1e-6f + r));
    float d[CHAINS][4];
#pragma unroll
    for (int j = 0; j < CHAINS; ++j) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.0f;
    for (int i = 0; i < iters; ++i)
#pragma unroll
        for (int j = 0; j < CHAINS; ++j)
            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                         "{%%0, %%1, %%2, %%3}, {%%4, %%5, %%6, %%7}, {%%8, %%9}, "
                         "{%%0, %%1, %%2, %%3};"
                         : "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < CHAINS; ++j) sum += d[j][0] + d[j][1] + d[j][2] + d[j][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

// Hopper's warpgroup product (sm_90a only; elsewhere the kernel is empty and not timed): each
// warpgroup issues WGMMA_BATCH m64n128k8 TF32 wgmma into one accumulator set per commit, A from
// registers, B from a zeroed 16 KiB shared tile through a 128-byte-swizzle descriptor (its
// values do not matter to the pipe, only that every read stays inside the tile).
#define WGMMA_BATCH %(wgmma_batch)d
extern "C" __global__ void __launch_bounds__(256) wgmma_tf32_peak(float* out, const int iters) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __shared__ __align__(1024) float tile[128 * 32];
    for (int i = threadIdx.x; i < 128 * 32; i += blockDim.x) tile[i] = 0.0f;
    __syncthreads();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    const unsigned address = (unsigned)__cvta_generic_to_shared(tile);
    const unsigned long long desc = (unsigned long long)((address & 0x3FFFF) >> 4)
        | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
    unsigned a[4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
        asm("cvt.rna.tf32.f32 %%0, %%1;" : "=r"(a[r]) : "f"(threadIdx.x * 1e-3f + r));
    float d[64];
#pragma unroll
    for (int j = 0; j < 64; ++j) d[j] = 0.0f;
    for (int i = 0; i < iters; ++i) {
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int b = 0; b < WGMMA_BATCH; ++b)
            asm volatile(
                "{\n.reg .pred p;\nsetp.ne.b32 p, %%69, 0;\n"
                "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
                "{%%0, %%1, %%2, %%3, %%4, %%5, %%6, %%7, %%8, %%9, %%10, %%11, %%12, %%13, %%14, "
                "%%15, %%16, %%17, %%18, %%19, %%20, %%21, %%22, %%23, %%24, %%25, %%26, %%27, "
                "%%28, %%29, %%30, %%31, %%32, %%33, %%34, %%35, %%36, %%37, %%38, %%39, %%40, "
                "%%41, %%42, %%43, %%44, %%45, %%46, %%47, %%48, %%49, %%50, %%51, %%52, %%53, "
                "%%54, %%55, %%56, %%57, %%58, %%59, %%60, %%61, %%62, %%63}, "
                "{%%64, %%65, %%66, %%67}, %%68, p, 1, 1;\n}\n"
                : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                  "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                  "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                  "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                  "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                  "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                  "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
                  "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
                  "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    }
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 64; ++j) sum += d[j];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
#endif
}
""" % {"chains": CHAINS, "ffma_unroll": FFMA_UNROLL, "wgmma_batch": WGMMA_BATCH}

THREADS = 256         # 8 warps a block
BLOCKS_PER_SM = 4     # 32 warps an SM: every scheduler has several to pick from
MMA_FLOPS = 2 * 16 * 8 * 8  # one m16n8k8 per warp
WGMMA_BLOCKS_PER_SM = 2     # 4 warpgroups an SM (94 registers a thread): one waits, one issues
WGMMA_FLOPS = 2 * 64 * 128 * 8  # one m64n128k8 per warpgroup


def measure(device: int = 0, repeats: int = 10, ffma_iters: int = 4096,
            mma_iters: int = 2048, wgmma_iters: int = 512) -> dict:
    """Median TFLOPS of each pipe, with the device's name and the FP32 figure its clock implies."""
    from runner.backends.cuda import CUDABackend

    backend = CUDABackend(device)
    info = backend.device_info()
    if backend.compute_capability < 80:
        raise RunError(f"{info.name} (compute capability {info.compute_capability}) has no "
                       "TF32 mma.sync; runner.ceiling needs 8.0 or later")
    program = backend.compile(SOURCE, "ceiling.cu",
                              ["ffma_peak", "mma_tf32_peak", "wgmma_tf32_peak"], {})
    blocks = info.compute_units * BLOCKS_PER_SM
    out = backend.alloc(blocks * THREADS)

    def median_ms(kernel, args, blocks=blocks):
        backend.launch(kernel, [blocks], [THREADS], args)  # warm-up and load
        backend.synchronize()
        return statistics.median(
            backend.time_ms(lambda: backend.launch(kernel, [blocks], [THREADS], args))
            for _ in range(repeats))

    ffma_ms = median_ms(program.kernels["ffma_peak"],
                        [out, ffma_iters, np.float32(0.999), np.float32(1e-3)])
    mma_ms = median_ms(program.kernels["mma_tf32_peak"], [out, mma_iters])
    wgmma_tflops = None
    if backend.compute_capability == 90:  # sm_90a: the kernel is empty on any other target
        groups = info.compute_units * WGMMA_BLOCKS_PER_SM * (THREADS // 128)
        wgmma_ms = median_ms(program.kernels["wgmma_tf32_peak"], [out, wgmma_iters],
                             blocks=info.compute_units * WGMMA_BLOCKS_PER_SM)
        wgmma_tflops = WGMMA_FLOPS * WGMMA_BATCH * wgmma_iters * groups / wgmma_ms / 1e9
    threads = blocks * THREADS
    ffma_flops = 2.0 * CHAINS * ffma_iters * threads
    mma_flops = float(MMA_FLOPS) * CHAINS * mma_iters * (threads // 32)
    clock_khz = int(backend._cupy.cuda.runtime.getDeviceProperties(device)["clockRate"])
    return {
        "device": info.name,
        "driver": info.driver,
        "sms": info.compute_units,
        "ffma_tflops": ffma_flops / ffma_ms / 1e9,
        "mma_tf32_tflops": mma_flops / mma_ms / 1e9,
        "wgmma_tf32_tflops": wgmma_tflops,  # None before Hopper
        # 128 FP32 lanes an SM on Volta and later, 2 flops an FMA, at the reported clock
        "ffma_tflops_at_clock": info.compute_units * 128 * 2 * clock_khz / 1e9,
        "clock_mhz": clock_khz / 1e3,
    }


def render(result: dict) -> str:
    tf32 = result["mma_tf32_tflops"]
    return "\n".join([
        f"{result['device']} · {result['sms']} SMs · {result['driver']}",
        f"  FFMA (FP32 SIMT)          {result['ffma_tflops']:8.1f} TFLOPS measured "
        f"({result['ffma_tflops_at_clock']:.1f} at the reported {result['clock_mhz']:.0f} MHz)",
        f"  mma.sync m16n8k8 TF32     {tf32:8.1f} TFLOPS measured",
        f"  3xTF32 on mma.sync        {tf32 / 3:8.1f} TFLOPS at most (three products per term)",
        *([f"  wgmma m64n128k8 TF32      {result['wgmma_tf32_tflops']:8.1f} TFLOPS measured",
           f"  3xTF32 on wgmma           {result['wgmma_tf32_tflops'] / 3:8.1f} TFLOPS at most"]
          if result.get("wgmma_tf32_tflops") else []),
    ])


def record(result: dict, uri: str, experiment: str) -> str:
    """Log the ceilings as a run of `experiment` (tag gemmlab.ceiling), which the experiment's
    report reads to set each step against its pipe; returns the run id."""
    from mlflow.tracking import MlflowClient

    from runner.record import names
    from runner.record.store import ensure_store
    from runner.record.tracking import experiment_for, provenance_tags

    ensure_store(uri)
    client = MlflowClient(uri)
    tags = {**provenance_tags(), names.CEILING: "true", names.DEVICE_NAME: result["device"],
            names.DEVICE_DRIVER: result["driver"]}
    tags[names.COMMAND] = "python -m runner.ceiling " + " ".join(sys.argv[1:])
    run = client.create_run(experiment_for(uri, experiment),
                            run_name=f"ceilings · {result['device']}", tags=tags)
    metrics = {names.CEILING_FFMA: result["ffma_tflops"],
               names.CEILING_FFMA_AT_CLOCK: result["ffma_tflops_at_clock"],
               names.CEILING_MMA_TF32: result["mma_tf32_tflops"],
               names.CEILING_WGMMA_TF32: result.get("wgmma_tf32_tflops"),
               names.CEILING_CLOCK_MHZ: result["clock_mhz"]}
    for key, value in metrics.items():
        if value is not None:
            client.log_metric(run.info.run_id, key, value)
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runner.ceiling", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", type=int, default=0, help="CUDA device id (default 0)")
    parser.add_argument("--repeats", type=int, default=10, help="timed launches per pipe (>= 3)")
    parser.add_argument("--experiment", help="record the ceilings as a run of this MLflow "
                        "experiment, for its report page")
    parser.add_argument("--uri", default="sqlite:///mlflow.db",
                        help="MLflow store for --experiment (default sqlite:///mlflow.db)")
    args = parser.parse_args(argv)
    if args.repeats < 3:
        parser.error("--repeats must be at least 3 (the median of fewer is not robust)")
    try:
        result = measure(args.device, args.repeats)
        print(render(result))
        if args.experiment:
            run_id = record(result, args.uri, args.experiment)
            print(f"  recorded: MLflow run {run_id} (experiment '{args.experiment}') in "
                  f"{args.uri}")
    except RunError as error:
        print(f"gemmlab: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
