"""Reading a recorded run back: its rate, unit, size, tiling values, status and headline
reference (the vendor library of its own precision, and its % of it).

One place for what the sweep summary, the report, the tuning page and the seed tables all read
from an MLflow run, so that they cannot disagree on what a run measured.
"""

import re
from dataclasses import dataclass
from typing import Mapping, Optional

from runner.config.measurement import NOISE_LIMIT
from runner.record import names
from runner.results.runs import MEASURED

# How every page and table picks the run it shows for a step, size, backend and device
# (best_runs): said on each of them in these words.
BEST_RULE = ("the fastest measured run (ok or cached) of each step, size, backend and device, "
             "by its median rate")


def is_gemm(run) -> bool:
    return run.data.tags.get(names.OPERATION, "sgemm") == "sgemm"


def rate(run) -> Optional[float]:
    """GFLOPS for SGEMM, GB/s for copies and transposes (None where the run measured nothing)."""
    return run.data.metrics.get(names.GFLOPS if is_gemm(run) else names.GBPS)


def vendor_rate(run) -> Optional[float]:
    return run.data.metrics.get(names.VENDOR_GFLOPS if is_gemm(run) else names.VENDOR_GBPS)


def unit(run) -> str:
    return "GFLOPS" if is_gemm(run) else "GB/s"


def size_label(run) -> str:
    """`MxNxK` for SGEMM, `MxN` for copies."""
    params = run.data.params
    size = f"{params.get(names.M)}x{params.get(names.N)}"
    return size + (f"x{params.get(names.K)}" if is_gemm(run) else "")


def tiling(run) -> str:
    """The tiling values, `BK=16 BM=128 …`."""
    return " ".join(f"{key.rsplit('.', 1)[-1]}={value}"
                    for key, value in sorted(run.data.params.items())
                    if key.startswith(names.KERNEL_PARAMS_PREFIX))


def cell(run) -> tuple[str, str, str, str]:
    """(kernel, size label, backend, device): the runs whose rates compete for one best."""
    return (run.data.params.get(names.KERNEL_NAME, "?"), size_label(run),
            run.data.params.get(names.BACKEND_NAME, "?"), run.data.tags.get(names.DEVICE_NAME, "?"))


def best_runs(runs) -> dict:
    """cell -> its best run (BEST_RULE): the highest rate among the measured runs (ok or
    cached) with a rate, the newest of equal ones. Never the newest for being the newest: a
    search's last trial is not its best (issue 58)."""
    best: dict = {}
    for run in sorted(runs, key=lambda r: -(r.info.start_time or 0)):
        value = rate(run)
        if value is None or status(run) not in MEASURED:
            continue
        held = best.get(cell(run))
        if held is None or value > rate(held):
            best[cell(run)] = run
    return best


def status(run) -> str:
    """ok, cached, refused, failed, impossible, timeout or killed (the `gemmlab.status` tag);
    for runs recorded before the tag: FINISHED is ok, RUNNING running, anything else failed."""
    tagged = run.data.tags.get(names.STATUS)
    if tagged:
        return tagged
    return {"FINISHED": "ok", "RUNNING": "running", "SCHEDULED": "running"}.get(
        run.info.status, "failed")


def is_series(run) -> bool:
    """A sweep's series run (a line of its chart, runner/sweep/series.py), never a job."""
    return run.data.tags.get(names.SERIES) == "true"


def library_name(recorded: str) -> str:
    """A vendor library's name as pages show it: `cuBLAS TF32 (CuPy, …)` -> `cuBLAS TF32`,
    `cuda device-to-device copy` -> `device copy`."""
    short = recorded.split(" (", 1)[0].strip()
    return "device copy" if short.endswith("device-to-device copy") else short


@dataclass(frozen=True)
class Reference:
    """The headline comparison of a run: the vendor library of its own precision (cuBLAS TF32
    for a TF32 step; cuBLAS SGEMM for FP32 and 3xTF32; numpy SGEMM on a CPU; the device copy
    for copies), the run's rate as % of it (None where the baseline stayed noisy or was not
    measured), and the library's own rate in the run."""
    name: str
    pct: Optional[float]
    rate: Optional[float]

    def text(self, digits: int = 1) -> str:
        """`98.3% of cuBLAS TF32`, or `no % of cuBLAS TF32` (with `digits` decimals)."""
        return (f"no % of {self.name}" if self.pct is None
                else f"{self.pct:.{digits}f}% of {self.name}")


def reference_of(metrics: Mapping, tags: Mapping, params: Mapping) -> Optional[Reference]:
    """The headline reference from a run's records (None where no baseline ran): the
    `perf.reference` tag and `perf/pct_of_reference` where recorded; for runs recorded before
    them (or cached copies of such), the same read from the TF32 or the plain vendor figures."""
    gemm = tags.get(names.OPERATION, "sgemm") == "sgemm"
    if gemm and params.get(names.KERNEL_PRECISION, "fp32") == "tf32":
        if not any(key in tags for key in (names.VENDOR_NAME, names.VENDOR_TF32_NAME,
                                           names.REFERENCE)):
            return None
        name = tags.get(names.REFERENCE) or library_name(
            tags.get(names.VENDOR_TF32_NAME) or "cuBLAS TF32")
        pct = metrics.get(names.PCT_OF_REFERENCE, metrics.get(names.PCT_OF_VENDOR_TF32))
        return Reference(name, pct, metrics.get(names.VENDOR_TF32_GFLOPS))
    if names.VENDOR_NAME not in tags and names.REFERENCE not in tags:
        return None
    name = tags.get(names.REFERENCE) or library_name(tags[names.VENDOR_NAME])
    pct = metrics.get(names.PCT_OF_REFERENCE, metrics.get(names.PCT_OF_VENDOR))
    rate = metrics.get(names.VENDOR_GFLOPS if gemm else names.VENDOR_GBPS)
    return Reference(name, pct, rate)


def reference(run) -> Optional[Reference]:
    """The run's headline reference (see reference_of)."""
    return reference_of(run.data.metrics, run.data.tags, run.data.params)


def pct_cell(run, digits: int = 1) -> str:
    """`98.3% cuBLAS TF32` for a table's cell, `—` where there is no %."""
    found = reference(run)
    if found is None or found.pct is None:
        return "—"
    return f"{found.pct:.{digits}f}% {found.name}"


def hygiene(run, reasons: bool = False) -> str:
    """What was not clean while the run was timed, in a few words (`GPU throttled: clocks held
    back: hw_slowdown`, `clocks: sw_power_cap`, `host shared`, `samples noisy: median ±12.5%`),
    or "" where the GPU and the host were clean or not watched and the samples agree; with
    `reasons`, the host's in words too. A cached run says its source's (copied with it)."""
    return hygiene_of(run.data.metrics, run.data.tags, reasons)


def unclean(metrics: Mapping, tags: Mapping) -> str:
    """Why a measurement is not one to reuse unasked, with its reasons (`host shared (other
    processes used 1.50 of 2 CPU cores …)`, `GPU throttled: …`, `samples noisy: median
    ±12.5%`), or "" where its host and GPU were clean (or not watched) and its median is known
    to within NOISE_LIMIT. The GPU's clock reasons alone are no reason: a loaded GPU reports a
    power cap without being disturbed."""
    gpu, host = tags.get(names.GPU_HYGIENE), tags.get(names.HOST_HYGIENE)
    if (gpu in (None, "clean") and host in (None, "clean")
            and not noise_text(metrics.get(names.TIME_NOISE))):
        return ""
    return hygiene_of(metrics, tags, reasons=True)


def hygiene_of(metrics: Mapping, tags: Mapping, reasons: bool = False) -> str:
    """hygiene() from a run's metrics and tags."""
    notes = []
    gpu = tags.get(names.GPU_HYGIENE)
    if gpu and gpu != "clean":
        why = (tags.get(names.GPU_HYGIENE_REASONS) or "").strip("— ")
        notes.append(f"GPU {gpu}" + (f": {why}" if why else ""))
    elif tags.get(names.GPU_CLOCK_REASONS) and tags.get(names.GPU_CLOCK_REASONS) != "none":
        notes.append(f"clocks: {tags[names.GPU_CLOCK_REASONS]}")
    host = tags.get(names.HOST_HYGIENE)
    if host and host != "clean":
        why = tags.get(names.HOST_HYGIENE_REASONS, "") if reasons else ""
        notes.append(f"host {host}" + (f" ({why})" if why else ""))
    noise = noise_text(metrics.get(names.TIME_NOISE))
    if noise:
        notes.append(noise)
    return "; ".join(notes)


def noisy(run) -> str:
    """`samples noisy: median ±12.5%` where the run's median is not known to within
    NOISE_LIMIT (the limit a vendor baseline is held to), else "": a rate that a host
    holding launches back can make look like a steady figure (37% of cuBLAS SGEMM, its samples
    from 62 µs to 5 ms, under a profiler)."""
    return noise_text(run.data.metrics.get(names.TIME_NOISE))


def noise_text(noise: Optional[float]) -> str:
    """`samples noisy: median ±12.5%` for a median's noise past NOISE_LIMIT, else ""
    (none measured, or a single sample's infinite one)."""
    if noise is None or not NOISE_LIMIT < noise < float("inf"):
        return ""
    return f"samples noisy: median ±{noise:.1%}"


def clock(run) -> str:
    """The median SM clock while timed (`1,980 MHz`), or "" where none was read."""
    mhz = run.data.metrics.get(names.GPU_SM_CLOCK_MHZ)
    return "" if mhz is None else f"{mhz:,.0f} MHz"


def commit(run) -> str:
    """The gemmlab commit that measured the run, shortened (`4788ee4`, `4788ee4-dirty`)."""
    full = run.data.tags.get(names.GIT_COMMIT, "")
    return re.sub(r"^([0-9a-f]{7})[0-9a-f]*", r"\1", full) if full else "?"


def size_short(run) -> str:
    """`4096³` for a square SGEMM, `4096²` for a square copy, else `MxNxK` (`MxN`)."""
    label = size_label(run)
    dims = label.split("x")
    if len(set(dims)) == 1:
        return dims[0] + ("³" if len(dims) == 3 else "²")
    return label


def rate_text(value: float, unit_name: str) -> str:
    """`397,645 GFLOPS`; three significant digits below 100 (`3.27 GFLOPS` on a CPU)."""
    return f"{value:,.0f} {unit_name}" if abs(value) >= 100 else f"{value:.3g} {unit_name}"


def headline_of(metrics: Mapping, tags: Mapping, params: Mapping) -> str:
    """A measured run's result in a few words, from its records: `397,645 GFLOPS · 98% cuBLAS
    TF32`, then ` · GPU throttled` / ` · host shared` where the timing was not clean; "" where
    no rate was recorded."""
    gemm = tags.get(names.OPERATION, "sgemm") == "sgemm"
    value = metrics.get(names.GFLOPS if gemm else names.GBPS)
    if value is None:
        return ""
    words = rate_text(value, "GFLOPS" if gemm else "GB/s")
    found = reference_of(metrics, tags, params)
    if found is not None:
        words += (f" · {found.pct:.0f}% {found.name}" if found.pct is not None
                  else f" · no % of {found.name}")
    gpu, host = tags.get(names.GPU_HYGIENE), tags.get(names.HOST_HYGIENE)
    if gpu and gpu != "clean":
        words += f" · GPU {gpu}"
    if host and host != "clean":
        words += f" · host {host}"
    return words


def run_title(params: Mapping, tags: Mapping, outcome: str) -> Optional[str]:
    """A job's MLflow run name, what differs first so that it reads within the runs table's
    default width: kernel and size, then the outcome (`397,645 GFLOPS · 98% cuBLAS TF32`, or
    `failed`), then backend and tiling: `matmul_13 4096³ · 397,645 GFLOPS · 98% cuBLAS TF32 ·
    cuda BM=128 BN=256`. None before the kernel and size were recorded."""
    kernel = params.get(names.KERNEL_NAME)
    if not kernel or params.get(names.M) is None:
        return None
    gemm = tags.get(names.OPERATION, "sgemm") == "sgemm"
    dims = [params.get(names.M), params.get(names.N)] + ([params.get(names.K)] if gemm else [])
    size = (dims[0] + ("³" if gemm else "²")) if len(set(dims)) == 1 else "x".join(map(str, dims))
    tiling_values = " ".join(f"{key.rsplit('.', 1)[-1]}={value}"
                             for key, value in sorted(params.items())
                             if key.startswith(names.KERNEL_PARAMS_PREFIX))
    rest = " ".join(filter(None, [params.get(names.BACKEND_NAME), tiling_values]))
    return " · ".join(filter(None, [f"{kernel} {size}", outcome, rest]))
