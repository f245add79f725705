"""What a run records beside its time: its program's resources (`resource_metrics`), the GPU's
clocks, power and neighbours during the timed launches (`record_gpu_state`), energy spans
(`record_energy`), the device's ceiling and the rate's share of it (`judge_against_ceiling`),
samples as an artifact (`samples_text`), and the vendor baseline's figures beside the kernel's
(`record_vendor`)."""

from typing import Callable, Optional

from runner.backends.base import DeviceInfo, KernelResources
from runner.config.spec import KernelPlan
from runner.errors import ImpossibleResult
from runner.record import names
from runner.run.gpu_state import EnergySpan, GpuState
from runner.run.peak import ceiling, impossible_reason, nvml_limits
from runner.run.timing import TimeStats
from runner.run.vendor import UNUSABLE_NOTES, VendorResult


def resource_metrics(resources: KernelResources, prefix: str = names.RESOURCE_PREFIX,
                     dynamic_local_bytes: int = 0) -> dict:
    """`shared_bytes` is what one work-group holds: the static local/shared memory the compiler
    reports plus the dynamic amount the launch asks for (a ring of stages sized by its
    parameters), which no compiler log shows; `dynamic_shared_bytes` keeps the latter apart."""
    static = resources.local_memory_bytes
    return {
        f"{prefix}shared_bytes": None if static is None else static + dynamic_local_bytes,
        f"{prefix}dynamic_shared_bytes": dynamic_local_bytes,
        f"{prefix}registers": resources.registers,
        f"{prefix}spill_bytes": resources.spill_bytes,
        f"{prefix}spill_store_bytes": resources.spill_store_bytes,
        f"{prefix}spill_load_bytes": resources.spill_load_bytes,
        f"{prefix}stack_bytes": resources.stack_bytes,
        f"{prefix}private_bytes": resources.private_memory_bytes,
        f"{prefix}max_work_group_size": resources.max_work_group_size,
    }


def record_gpu_state(recorder, metrics: dict, state: GpuState, plan: KernelPlan,
                     launches: int) -> None:
    """The GPU's clocks, power, energy and neighbours during the timed launches."""
    if not state.sm_clock_mhz:
        return
    metrics.update(state.metrics())
    power = metrics.get(names.GPU_POWER_W)
    if state.energy() is not None and launches:  # the timed span: gaps and holds included
        metrics[names.GPU_ENERGY_J_PER_LAUNCH] = state.energy() / launches
    if power:
        if plan.flops:
            metrics[names.GFLOPS_PER_WATT] = metrics[names.GFLOPS] / power
        else:
            metrics[names.GBPS_PER_WATT] = metrics[names.GBPS] / power
    recorder.metrics(metrics)
    if state.present:
        recorder.tags({names.GPU_OTHER_PROCESSES: ", ".join(map(str, sorted(state.present)))})
    recorder.tags({names.GPU_HYGIENE: state.hygiene,
                   names.GPU_HYGIENE_REASONS: state.why() or "—",
                   names.GPU_CLOCK_REASONS: ", ".join(sorted(state.reasons)) or "none"})


def repeated(enqueue: Callable[[], list], count: int) -> list:
    """Every launch of the step, `count` times over, back to back: their events in order."""
    return [event for _ in range(count) for event in (enqueue() or ())]


def record_energy(recorder, metrics: dict, plan: KernelPlan, prefix: str,
                  spent: Optional[EnergySpan], ratio_key: Optional[str] = None) -> None:
    """An energy span's figures under `prefix`, and with `ratio_key` the kernel's work per joule
    over this one's; where none could be measured, a tag that says so (never a 0)."""
    if spent is None:
        recorder.tags({prefix.replace("/", ".") + "unknown": (
            "no energy figure: the span lasted under a second, NVML's counter moved too few "
            "times in it, or the baseline was too noisy to be used")})
        return
    metrics.update(spent.metrics(prefix, plan.flops, plan.min_bytes))
    per_watt = "gflops_per_watt" if plan.flops else "gbps_per_watt"
    own = metrics.get(f"{names.ENERGY_PREFIX}{per_watt}")
    if ratio_key is not None and own:
        metrics[ratio_key] = own / metrics[f"{prefix}{per_watt}"]
    recorder.metrics(metrics)


def judge_against_ceiling(recorder, metrics: dict, plan: KernelPlan, device: DeviceInfo,
                          gpu_handle, flush_l2: bool) -> None:
    """The device's ceiling for this step (runner/run/peak.py) and the rate's share of it,
    recorded; a rate above it is an ImpossibleResult."""
    limits = nvml_limits(gpu_handle, device) if device.is_nvidia_gpu else None
    limit = ceiling(plan, device, limits, flush_l2)
    if limit is None:
        recorder.tags({names.CEILING_BASIS: "unknown: no ceiling is known for this device"})
        return
    rate = metrics[names.GFLOPS] if limit.unit == "GFLOPS" else metrics[names.GBPS]
    metrics[names.CEILING_GFLOPS if limit.unit == "GFLOPS" else names.CEILING_GBPS] = limit.rate
    metrics[names.PCT_OF_PEAK] = 100.0 * rate / limit.rate
    recorder.metrics(metrics)
    recorder.tags({names.CEILING_BASIS: limit.basis[:5000]})
    if limit.exceeded_by(rate):
        raise ImpossibleResult(impossible_reason(plan, device, limit, rate,
                                                 plan.size.label(plan.operation)))


def samples_text(samples_ms) -> str:
    """Timed samples as an artifact: one per line, in milliseconds, in the order taken."""
    return "".join(f"{sample:.6f}\n" for sample in samples_ms)


def finite(value: float) -> Optional[float]:
    return value if value == value and abs(value) != float("inf") else None


def library_name(recorded: str) -> str:
    """A vendor library's name as pages show it (runner/results/records.py, library_name):
    `cuBLAS TF32 (CuPy, …)` -> `cuBLAS TF32`, `cuda device-to-device copy` -> `device copy`."""
    short = recorded.split(" (", 1)[0].strip()
    return "device copy" if short.endswith("device-to-device copy") else short


def record_vendor(recorder, metrics: dict, plan: KernelPlan, vendor: Optional[VendorResult],
                  vendor_gpu: GpuState, stats: TimeStats, energy: bool) -> Optional[TimeStats]:
    """The vendor stage's record: the baseline's own figures and its GPU's state, the kernel's
    % of it (the kernel's median in `stats`), the TF32 library's beside it for a TF32 step, the
    headline against the library of the step's own precision, and with `energy` the energy
    spans; returns the baseline's statistics (None without a baseline)."""
    vendor_stats = None
    if vendor is not None:
        # Measured just now, and cuBLAS SGEMM alone (a TF32 step's baseline also runs cuBLAS
        # in TF32 mode inside the same span, which these figures would mix in).
        if len(vendor_gpu.sm_clock_mhz) > 2 and plan.precision == "fp32":
            metrics.update(vendor_gpu.metrics(names.VENDOR_GPU_PREFIX))
            recorder.tags({names.VENDOR_GPU_HYGIENE: vendor_gpu.hygiene})
        if vendor.device:
            recorder.tags({names.VENDOR_DEVICE: vendor.device})
        for name, value in vendor.notes.items():
            if name not in UNUSABLE_NOTES:
                recorder.tags({f"vendor.{name}": value})
        if vendor.unusable:  # measured, recorded, but no number is set against it
            recorder.tags({names.VENDOR_UNUSABLE: vendor.unusable})
        vendor_stats = TimeStats.of(vendor.samples_ms)
        vendor_seconds = vendor_stats.median * 1e-3
        metrics.update({
            names.VENDOR_TIME_MS_MEDIAN: vendor_stats.median,
            names.VENDOR_GFLOPS: plan.flops / vendor_seconds / 1e9 if plan.flops else None,
            names.VENDOR_GBPS: plan.min_bytes / vendor_seconds / 1e9,
            names.VENDOR_REL_ERROR: vendor.rel_error,
            names.VENDOR_TIME_NOISE: finite(vendor_stats.noise),
            names.VENDOR_TIME_SAMPLES: float(vendor_stats.repeats),
            names.PCT_OF_VENDOR: None if vendor.unusable else
            100.0 * vendor_stats.median / stats.median,
        })
        if vendor.rel_error and metrics.get(names.CHECK_REL_ERROR) is not None:
            metrics[names.CHECK_ERROR_VS_VENDOR] = metrics[names.CHECK_REL_ERROR] / vendor.rel_error
        recorder.tags({names.VENDOR_NAME: vendor.name})
        recorder.text(samples_text(vendor.samples_ms), names.VENDOR_SAMPLES_ARTIFACT)
        if energy:
            record_energy(recorder, metrics, plan, names.VENDOR_ENERGY_PREFIX, vendor.energy,
                          names.X_VENDOR_PER_JOULE)
        if vendor.tf32 is not None:  # a TF32 step against the library in the same mode
            tf32_median = TimeStats.of(vendor.tf32.samples_ms).median
            metrics.update({
                "vendor_tf32/time_ms_median": tf32_median,
                "vendor_tf32/gflops": plan.flops / (tf32_median * 1e-3) / 1e9,
                "vendor_tf32/rel_error": vendor.tf32.rel_error,
                names.PCT_OF_VENDOR_TF32: None if "noisy" in vendor.tf32.notes else
                100.0 * tf32_median / stats.median,
            })
            recorder.tags({"vendor_tf32.name": vendor.tf32.name})
            if energy:
                record_energy(recorder, metrics, plan, names.VENDOR_TF32_ENERGY_PREFIX,
                              vendor.tf32.energy, names.X_VENDOR_TF32_PER_JOULE)
            if "noisy" in vendor.tf32.notes:
                recorder.tags({"vendor_tf32.unusable": vendor.tf32.notes["noisy"]})
            recorder.text(samples_text(vendor.tf32.samples_ms),
                          names.VENDOR_TF32_SAMPLES_ARTIFACT)
        # The headline: against the library of the step's own precision (TF32 for a TF32
        # step, plain SGEMM for FP32 and 3xTF32), both figures above kept as they are.
        tf32 = plan.precision == "tf32"
        reference = vendor.tf32 if tf32 else vendor
        metrics[names.PCT_OF_REFERENCE] = metrics.get(
            names.PCT_OF_VENDOR_TF32 if tf32 else names.PCT_OF_VENDOR)
        recorder.tags({names.REFERENCE: "cuBLAS TF32" if reference is None
                       else library_name(reference.name)})
        recorder.metrics(metrics)
    return vendor_stats
