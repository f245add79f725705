"""The arithmetic ceilings of the current NVIDIA GPU, measured: what its FP32 FMA pipe (the SIMT
steps' ceiling) and its TF32 tensor cores through `mma.sync` (matmul_10's and matmul_11's
instruction) can do at most, each by a kernel that does nothing else.

    python -m runner.ceiling                    # CUDA device 0
    python -m runner.ceiling --device 1 --repeats 20

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
""" % {"chains": CHAINS, "ffma_unroll": FFMA_UNROLL}

THREADS = 256         # 8 warps a block
BLOCKS_PER_SM = 4     # 32 warps an SM: every scheduler has several to pick from
MMA_FLOPS = 2 * 16 * 8 * 8  # one m16n8k8 per warp


def measure(device: int = 0, repeats: int = 10, ffma_iters: int = 4096,
            mma_iters: int = 2048) -> dict:
    """Median TFLOPS of each pipe, with the device's name and the FP32 figure its clock implies."""
    from runner.backends.cuda import CUDABackend

    backend = CUDABackend(device)
    info = backend.device_info()
    if backend.compute_capability < 80:
        raise RunError(f"{info.name} (compute capability {info.compute_capability}) has no "
                       "TF32 mma.sync; runner.ceiling needs 8.0 or later")
    program = backend.compile(SOURCE, "ceiling.cu", ["ffma_peak", "mma_tf32_peak"], {})
    blocks = info.compute_units * BLOCKS_PER_SM
    out = backend.alloc(blocks * THREADS)

    def median_ms(kernel, args):
        backend.launch(kernel, [blocks], [THREADS], args)  # warm-up and load
        backend.synchronize()
        return statistics.median(
            backend.time_ms(lambda: backend.launch(kernel, [blocks], [THREADS], args))
            for _ in range(repeats))

    ffma_ms = median_ms(program.kernels["ffma_peak"],
                        [out, ffma_iters, np.float32(0.999), np.float32(1e-3)])
    mma_ms = median_ms(program.kernels["mma_tf32_peak"], [out, mma_iters])
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
    ])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runner.ceiling", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", type=int, default=0, help="CUDA device id (default 0)")
    parser.add_argument("--repeats", type=int, default=10, help="timed launches per pipe (>= 3)")
    args = parser.parse_args(argv)
    if args.repeats < 3:
        parser.error("--repeats must be at least 3 (the median of fewer is not robust)")
    try:
        print(render(measure(args.device, args.repeats)))
    except RunError as error:
        print(f"gemmlab: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
