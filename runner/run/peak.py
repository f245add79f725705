"""What the device can do at most, for a run's arithmetic or its bytes: the ceiling every rate is
set against (`perf/pct_of_peak`), and the bound above which a rate is refused as impossible.

From the device's own properties, not measured (runner/ceiling.py measures the pipes; a run
cannot afford that, and a measured ceiling is a lower bound of the true one, a poor judge of
what is impossible):

- FP32 SIMT steps on an NVIDIA GPU: SMs x FP32 lanes per SM (by compute capability) x 2 flops
  (an FMA) x the GPU's highest SM clock (NVML's maximum; the clock a run saw is recorded beside
  it, but NVML samples every 10 ms and misses a short run's boost, so it cannot be the bound).
- TF32 steps: SMs x the tensor cores' dense TF32 flops per clock per SM x that clock; 3xTF32
  steps a third of it (three tensor products for each FP32-accurate one).
- Copies and transposes on an NVIDIA GPU: the bytes a run moves over the time DRAM needs for
  those that cannot have stayed in L2 (twice its size: an L2's worth of reads that hit, then an
  L2's worth of writes still dirty at the end), and never above the L2's own bandwidth, bounded
  at SMs x 128 bytes a clock.
- The CPU (OpenCL): cores x float lanes of its widest vectors (at least 8) x 2 (FMA) x 2 FMA
  units a core x the highest clock the driver or the OS reports; for bytes, 3 vector accesses
  (2 loads, 1 store) a cycle a core, its L1's bound. Both are upper bounds no code reaches.

A rate above its ceiling by more than the margin (MARGIN: GPU clocks are known exactly; a CPU's
turbo clock often is not reported) is status `impossible`: its timed launches did not do the work
the run claims.
"""

from dataclasses import dataclass
from typing import Optional

from runner.backends.base import DeviceInfo
from runner.config.spec import KernelPlan

# FP32 lanes per SM, by compute capability (CUDA C Programming Guide, "Arithmetic
# Instructions": 32-bit floating-point multiply-add results per clock per SM).
FP32_LANES = {(6, 0): 64, (7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64}
FP32_LANES_DEFAULT = 128  # 5.x, 6.1/6.2, 8.6, 8.7, 8.9, 9.0, 10.x, 12.x
# Dense TF32 tensor flops per clock per SM (whitepapers: A100 156 TFLOPS at 1410 MHz x 108 SMs,
# H100 SXM 495 at 1830 MHz x 132 SMs; Blackwell's doubled). Unknown newer ones: the largest.
TF32_FLOPS_PER_CLOCK = {(8, 0): 1024, (8, 6): 512, (8, 7): 1024, (8, 9): 512, (9, 0): 2048,
                        (10, 0): 4096, (10, 3): 4096, (12, 0): 1024}
L2_BYTES_PER_CLOCK_PER_SM = 128  # above any NVIDIA L2's bandwidth to the SMs (Hopper: ~64)
CPU_MIN_FLOAT_LANES = 8  # AVX: a driver that reports narrower vectors is not believed
CPU_FMA_UNITS = 2
CPU_ACCESSES_PER_CYCLE = 3  # 2 loads and 1 store of a full vector, each core
MARGIN = {"gpu": 0.05, "cpu": 0.25}


@dataclass(frozen=True)
class Ceiling:
    rate: float  # GFLOPS, or GB/s for a copy
    unit: str  # "GFLOPS" or "GB/s"
    what: str  # "FP32 peak", "TF32 tensor peak / 3", "DRAM bandwidth", …
    basis: str  # how it was found, in words (the run's perf.ceiling_basis tag)
    margin: float  # a rate above rate * (1 + margin) is impossible

    def exceeded_by(self, rate: Optional[float]) -> bool:
        return rate is not None and rate > self.rate * (1 + self.margin)


@dataclass(frozen=True)
class GpuLimits:
    """What NVML (or the driver's properties) says of an NVIDIA GPU's top clocks and memory."""
    sm_clock_mhz: Optional[float] = None
    memory_gbps: Optional[float] = None  # DRAM bandwidth at the top memory clock
    l2_bytes: Optional[int] = None


def nvml_limits(handle, device: DeviceInfo) -> GpuLimits:
    """The GPU's highest SM clock and its DRAM bandwidth from NVML, else what the backend read
    from the driver (device.max_clock_mhz, device.memory_gbps)."""
    clock, memory = device.max_clock_mhz, device.memory_gbps
    if handle is not None:
        try:
            import pynvml

            clock = float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
            memory_mhz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)
            width = pynvml.nvmlDeviceGetMemoryBusWidth(handle)
            memory = memory_mhz * 1e6 * 2 * width / 8 / 1e9  # double data rate
        except Exception:  # an older driver, or a container that hides it: the properties
            pass
    return GpuLimits(clock or None, memory or None, device.cache_bytes)


def _capability(device: DeviceInfo) -> Optional[tuple[int, int]]:
    try:
        major, minor = str(device.compute_capability).split(".")
        return int(major), int(minor)
    except (ValueError, AttributeError):
        return None


def ceiling(plan: KernelPlan, device: DeviceInfo, gpu: Optional[GpuLimits],
            flush_l2: bool) -> Optional[Ceiling]:
    """The run's ceiling, or None where the device is neither an NVIDIA GPU nor a CPU (or its
    properties do not tell enough): then no rate is judged."""
    if device.device_type == "cpu":
        return _cpu_ceiling(plan, device)
    if not device.is_nvidia_gpu or gpu is None or not gpu.sm_clock_mhz:
        return None
    capability = _capability(device)
    if capability is None:
        return None
    sms, clock = device.compute_units, gpu.sm_clock_mhz
    at = f"{sms} SMs at {clock:.0f} MHz (the GPU's highest SM clock)"
    margin = MARGIN["gpu"]
    if plan.flops:
        if plan.precision in ("tf32", "tf32x3"):
            per_clock = TF32_FLOPS_PER_CLOCK.get(capability, max(TF32_FLOPS_PER_CLOCK.values()))
            share = 3 if plan.precision == "tf32x3" else 1
            rate = sms * per_clock * clock * 1e6 / 1e9 / share
            what = "TF32 tensor peak" + (" / 3 (3xTF32)" if share == 3 else "")
            basis = (f"{what}: {per_clock} dense TF32 flops a clock per SM x {at}"
                     + (" / 3" if share == 3 else ""))
            return Ceiling(rate, "GFLOPS", what, basis, margin)
        lanes = FP32_LANES.get(capability, FP32_LANES_DEFAULT)
        rate = sms * lanes * 2 * clock * 1e6 / 1e9
        return Ceiling(rate, "GFLOPS", "FP32 peak",
                       f"FP32 peak: {lanes} FP32 lanes x 2 flops (FMA) x {at}", margin)
    if not gpu.memory_gbps:
        return None
    l2_gbps = sms * L2_BYTES_PER_CLOCK_PER_SM * clock * 1e6 / 1e9
    moved = float(plan.min_bytes)
    if flush_l2 or not gpu.l2_bytes:
        through_dram = moved
    else:
        through_dram = max(moved - 2 * gpu.l2_bytes, 0.0)
    if through_dram <= 0:
        rate, what = l2_gbps, "L2 bandwidth bound"
    else:
        rate = min(l2_gbps, gpu.memory_gbps * moved / through_dram)
        what = "DRAM bandwidth" if through_dram == moved else "DRAM bandwidth, less what L2 holds"
    basis = (f"{what}: {gpu.memory_gbps:,.0f} GB/s of DRAM (the top memory clock x the bus)"
             + ("" if through_dram == moved else
                f", {moved / 1e6:,.1f} MB moved of which at most {2 * gpu.l2_bytes / 1e6:,.1f} "
                f"MB (twice the L2) can avoid DRAM")
             + f"; L2 at most {l2_gbps:,.0f} GB/s ({L2_BYTES_PER_CLOCK_PER_SM} B a clock x {at})")
    return Ceiling(rate, "GB/s", what, basis, margin)


def _cpu_ceiling(plan: KernelPlan, device: DeviceInfo) -> Optional[Ceiling]:
    clock = cpu_clock_mhz(device)
    if not clock or not device.compute_units:
        return None
    lanes = max(device.float_vector_width or 0, CPU_MIN_FLOAT_LANES)
    cores = device.compute_units
    at = f"{cores} cores at {clock:.0f} MHz (the highest clock the driver or the OS reports)"
    margin = MARGIN["cpu"]
    if plan.flops:
        rate = cores * lanes * 2 * CPU_FMA_UNITS * clock * 1e6 / 1e9
        return Ceiling(rate, "GFLOPS", "CPU FP32 peak",
                       f"CPU FP32 peak: {lanes} float lanes x 2 flops (FMA) x {CPU_FMA_UNITS} FMA "
                       f"units x {at}", margin)
    rate = cores * CPU_ACCESSES_PER_CYCLE * lanes * 4 * clock * 1e6 / 1e9
    return Ceiling(rate, "GB/s", "CPU L1 bandwidth bound",
                   f"CPU L1 bandwidth bound: {CPU_ACCESSES_PER_CYCLE} accesses of {lanes * 4} "
                   f"bytes a cycle x {at}", margin)


def cpu_clock_mhz(device: DeviceInfo) -> Optional[float]:
    """The highest of the OpenCL driver's clock and the OS's (psutil: its maximum, else its
    current frequency); None where neither says."""
    clocks = [device.max_clock_mhz or 0.0]
    try:
        import psutil

        frequency = psutil.cpu_freq()
        if frequency is not None:
            clocks += [frequency.max or 0.0, frequency.current or 0.0]
    except Exception:  # no psutil, or an OS it cannot read: the driver's value alone
        pass
    best = max(clocks)
    return best if best > 0 else None


def impossible_reason(plan: KernelPlan, device: DeviceInfo, limit: Ceiling, rate: float,
                      size_label: str) -> str:
    """The one line of a run refused as impossible: both numbers and the likely cause."""
    scale, unit = (1e3, "TFLOPS") if limit.unit == "GFLOPS" else (1.0, "GB/s")
    if limit.unit == "GFLOPS" and limit.rate < 1e3:
        scale, unit = 1.0, "GFLOPS"
    return (f"{plan.name} at {size_label} measured {rate / scale:,.1f} {unit}, "
            f"{rate / limit.rate:,.1f}x the {device.name}'s {limit.what} of "
            f"{limit.rate / scale:,.1f} {unit} ({limit.basis}): its timed launches did not do "
            f"the work the run counts")
