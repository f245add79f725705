"""Reading a recorded run back: its rate, unit, size, tiling values and status.

One place for what the sweep summary, the report, the tuning page and the seed tables all read
from an MLflow run, so that they cannot disagree on what a run measured.
"""

from typing import Optional

from runner.record import names


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


def status(run) -> str:
    """ok, cached, refused, failed, impossible, timeout or killed (the `gemmlab.status` tag);
    for runs recorded before the tag: FINISHED is ok, RUNNING running, anything else failed."""
    tagged = run.data.tags.get(names.STATUS)
    if tagged:
        return tagged
    return {"FINISHED": "ok", "RUNNING": "running", "SCHEDULED": "running"}.get(
        run.info.status, "failed")
