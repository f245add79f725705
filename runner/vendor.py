"""The vendor baseline, in the same run, on the same device and data.

SGEMM: cuBLAS through CuPy (TF32 off) on an NVIDIA GPU, whichever backend runs the kernel;
numpy's BLAS when the OpenCL device is the CPU. Copy and transpose: the device's own
device-to-device copy of the same bytes, through the same backend.
"""

import os
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from runner.backends.base import Backend
from runner.operations import Problem, check_sgemm
from runner.schema import Operation
from runner.timing import measure


@dataclass(frozen=True)
class VendorResult:
    name: str
    samples_ms: list[float]
    rel_error: Optional[float] = None  # against the same float64 reference as the kernel


def _cuda_device_for(backend: Backend) -> Optional[int]:
    """The CUDA id of the backend's GPU, or None when it is not an NVIDIA GPU CuPy can use."""
    from runner.backends.cuda import gpu_count

    if backend.name == "cuda":
        return backend.device_id
    info = backend.device_info()
    if not info.is_nvidia_gpu or gpu_count() == 0:
        return None
    import cupy

    wanted = info.pci_bus_id
    for device_id in range(gpu_count()):
        if wanted is None or cupy.cuda.runtime.getDeviceProperties(device_id)["pciBusID"] == wanted:
            return device_id
    return None


def cublas_sgemm(A: np.ndarray, B: np.ndarray, device_id: int, warmup: int,
                 repeats: int, flush_l2: bool = False) -> tuple[list[float], np.ndarray]:
    os.environ["CUPY_TF32"] = "0"  # plain FP32: the comparison is FP32 against FP32
    import cupy

    from runner.backends.cuda import hold_queue

    with cupy.cuda.Device(device_id):
        a, b = cupy.asarray(A), cupy.asarray(B)
        c = cupy.full((A.shape[0], B.shape[1]), np.nan, dtype=cupy.float32)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()

        def once() -> float:
            hold_queue(cupy)  # as the kernels' own samples: the start event fires with the work
            start.record()
            cupy.matmul(a, b, out=c)
            end.record()
            end.synchronize()
            return cupy.cuda.get_elapsed_time(start, end)

        once()  # first call: handle creation and algorithm selection, never timed
        flush = None
        if flush_l2:  # the same cold start as the kernel's samples, on cuBLAS's device
            l2 = cupy.cuda.runtime.getDeviceProperties(device_id)["l2CacheSize"]
            scratch = cupy.empty(max(2 * l2, 64 << 20) // 4, dtype=cupy.float32)
            flush = lambda: scratch.fill(0)  # noqa: E731
        samples = measure(once, warmup, repeats, "cuBLAS SGEMM", flush)
        return samples, cupy.asnumpy(c)


def numpy_sgemm(A: np.ndarray, B: np.ndarray, warmup: int,
                repeats: int) -> tuple[list[float], np.ndarray]:
    out = np.empty((A.shape[0], B.shape[1]), dtype=np.float32)

    def once() -> float:  # host BLAS is synchronous: the host clock is its event
        start = time.perf_counter()
        np.matmul(A, B, out=out)
        return (time.perf_counter() - start) * 1e3

    once()
    return measure(once, warmup, repeats, "numpy SGEMM"), out


_measured: dict[tuple, Optional[VendorResult]] = {}


def vendor_baseline(backend: Backend, operation: Operation, problem: Problem, buffers: dict,
                    timing_cfg, check_cfg, seed: int) -> Optional[VendorResult]:
    """The baseline for this problem, measured once per backend, size, seed and settings in a
    process: the jobs of a sweep that share a size share one measurement of the library."""
    shape = tuple(array.shape for array in problem.inputs.values())
    key = (id(backend), operation, shape, seed, timing_cfg.warmup, timing_cfg.repeats,
           timing_cfg.flush_l2,
           check_cfg.tolerance, check_cfg.full_reference_max_macs, check_cfg.sample_rows,
           check_cfg.sample_cols)
    if key not in _measured:
        _measured[key] = _measure_baseline(backend, operation, problem, buffers, timing_cfg,
                                           check_cfg, seed)
    return _measured[key]


def _measure_baseline(backend: Backend, operation: Operation, problem: Problem, buffers: dict,
                      timing_cfg, check_cfg, seed: int) -> Optional[VendorResult]:
    warmup, repeats = timing_cfg.warmup, timing_cfg.repeats
    if operation is not Operation.sgemm:
        nbytes = problem.inputs["src"].nbytes
        destination = backend.alloc(problem.inputs["src"].size)
        source = buffers["src"]
        backend.device_copy(destination, source, nbytes)
        backend.synchronize()
        samples = measure(lambda: backend.time_ms(
            lambda: [backend.device_copy(destination, source, nbytes)]),
            warmup, repeats, "device copy",
            backend.flush_cache if timing_cfg.flush_l2 else None)
        return VendorResult(f"{backend.name} device-to-device copy", samples)

    A, B = problem.inputs["A"], problem.inputs["B"]
    device_id = _cuda_device_for(backend)
    if device_id is not None:
        samples, C = cublas_sgemm(A, B, device_id, warmup, repeats, timing_cfg.flush_l2)
        name = "cuBLAS SGEMM (CuPy, TF32 off)"
    elif backend.device_info().device_type == "cpu":
        samples, C = numpy_sgemm(A, B, warmup, repeats)
        name = "numpy SGEMM (host BLAS)"
    else:
        return None  # no vendor library known for this device: absent, not invented
    check = check_sgemm(A, B, C, check_cfg.tolerance, check_cfg.full_reference_max_macs,
                        check_cfg.sample_rows, check_cfg.sample_cols, seed)
    return VendorResult(name, samples, check.rel_error)
