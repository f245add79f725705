"""The vendor baseline, in the same run, on the same device and data.

SGEMM: cuBLAS through CuPy (TF32 off) on an NVIDIA GPU, whichever backend runs the kernel;
numpy's BLAS when the OpenCL device is the CPU. A step that is not plain FP32 (TF32 tensor cores)
is compared with cuBLAS in TF32 mode as well, on the same data. Copy and transpose: the device's own
device-to-device copy of the same bytes, through the same backend.

A baseline is measured and recorded, but set against the kernel (the headline %) only where it
was not disturbed (`VendorResult.unusable`): its median known to within NOISE_LIMIT after a
second try (`steady_samples`) and, where it ran on the host's CPUs (numpy's BLAS, a CPU
device's copy), other processes leaving free the cores its threads needed (`host_disturbed`).
With every core of a 2-core host loaded, one run in about fifteen printed matmul_1 at 256 at
67.9% of numpy SGEMM, against 1.6% in the others: numpy's threads, waiting on each other beside
other work, took 40 times as long, with samples steady enough to pass the noise check. A
disturbed baseline's record says why (`vendor.unusable`), and it is never reused.
"""

import dataclasses
import os
import time
import weakref
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from runner.backends.base import Backend
from runner.config.measurement import NOISE_LIMIT, Repetitions, Warmup
from runner.config.schema import Operation
from runner.config.spec import KernelPlan
from runner.run.gpu_state import EnergySpan
from runner.run.host_state import HostMonitor, HostState, shared_threshold
from runner.run.operations import Problem, check_sgemm
from runner.run.timing import measure, median_noise, timed_window


@dataclass(frozen=True)
class VendorResult:
    name: str
    samples_ms: list[float]
    rel_error: Optional[float] = None  # against the same float64 reference as the kernel
    tf32: Optional["VendorResult"] = None  # cuBLAS in TF32 mode, for a tensor-core step
    device: str = ""  # where it ran: "CUDA device 1 (00000000:65:00.0)", "host CPU"
    notes: dict = field(default_factory=dict)  # recorded as vendor.<key> tags
    energy: Optional[EnergySpan] = None  # its launches back to back (timing.energy_s)

    @property
    def unusable(self) -> str:
        """Why no % may be set against it, in words ("" where it may): UNUSABLE_NOTES."""
        return "; ".join(self.notes[key] for key in UNUSABLE_NOTES if key in self.notes)


# The notes that make a baseline unusable: its samples stayed noisy (steady_samples), other
# processes took the host's CPUs it ran on (host_disturbed). Recorded as `vendor.unusable`.
UNUSABLE_NOTES = ("noisy", "disturbed")


def _cuda_device_for(backend: Backend) -> Optional[int]:
    """The CUDA id of the backend's own GPU, or None when it is not an NVIDIA GPU CuPy can use
    or CUDA's GPUs cannot be told apart from it: the baseline then runs nowhere, rather than
    on a GPU another job may hold.

    An OpenCL device is matched by its full PCI address (domain, bus, device): bus numbers
    alone repeat across the domains of one host. Where NVIDIA's OpenCL gives only the bus, it
    must name exactly one of CUDA's GPUs."""
    from runner.backends.cuda import cuda_pci_address, gpu_count

    if backend.name == "cuda":
        return backend.device_id
    info = backend.device_info()
    if not info.is_nvidia_gpu or gpu_count() == 0:
        return None
    import cupy

    props = [cupy.cuda.runtime.getDeviceProperties(i) for i in range(gpu_count())]
    if info.pci_address is not None:
        found = [i for i, p in enumerate(props) if cuda_pci_address(p) == info.pci_address]
    elif info.pci_bus_id is not None:
        found = [i for i, p in enumerate(props) if int(p["pciBusID"]) == info.pci_bus_id]
    else:
        found = [0] if len(props) == 1 else []
    return found[0] if len(found) == 1 else None


def cuda_device_label(device_id: int) -> str:
    """"CUDA device 1 (00000000:65:00.0)": which GPU a baseline ran on, for its record."""
    try:
        import cupy

        from runner.backends.cuda import cuda_pci_address

        return (f"CUDA device {device_id} "
                f"({cuda_pci_address(cupy.cuda.runtime.getDeviceProperties(device_id))})")
    except Exception:  # the address is a detail: the device id alone still says where
        return f"CUDA device {device_id}"


# energy(run, launch_ms): the EnergySpan of run(n), n launches back to back (gpu_state.energy_span
# with the job's GPU and timing.energy_s bound), or None.
EnergyProbe = Callable[[Callable[[int], float], float], Optional[EnergySpan]]


def cublas_sgemm(A: np.ndarray, B: np.ndarray, device_id: int, warmup,
                 repeats, flush_l2: bool = False, tf32: bool = False,
                 energy: Optional[EnergyProbe] = None) -> tuple[list[float], np.ndarray, dict]:
    """cuBLAS through cupy.matmul: plain FP32 (the comparison of FP32 with FP32), or with
    `tf32` the TF32 tensor-core mode that reduced-precision steps are also compared with. With
    `energy`, its launches back to back after the samples, as the kernel's: notes["energy"]."""
    os.environ["CUPY_TF32"] = "0"
    import cupy
    from cupy._core import _routines_linalg as linalg

    from runner.backends.cuda import hold_queue

    label = "cuBLAS TF32" if tf32 else "cuBLAS SGEMM"
    if not tf32:  # CuPy's default mode for float32, with CUPY_TF32=0: cublasSgemm, FP32 FFMA
        return _cublas_samples(cupy, hold_queue, A, B, device_id, warmup, repeats, flush_l2, label,
                               energy)
    with cupy.cuda.Device(device_id):  # the mode is set for (and checked against) this GPU
        previous = linalg.get_compute_type(np.dtype(np.float32))
        linalg.set_compute_type(np.dtype(np.float32), linalg.COMPUTE_TYPE_TF32)
        try:
            return _cublas_samples(cupy, hold_queue, A, B, device_id, warmup, repeats, flush_l2,
                                   label, energy)
        finally:
            linalg.set_compute_type(np.dtype(np.float32), previous)


def _cublas_samples(cupy, hold_queue, A: np.ndarray, B: np.ndarray, device_id: int, warmup,
                    repeats, flush_l2: bool, label: str,
                    energy: Optional[EnergyProbe] = None) -> tuple[list[float], np.ndarray, dict]:
    with cupy.cuda.Device(device_id):
        a, b = cupy.asarray(A), cupy.asarray(B)
        c = cupy.empty((A.shape[0], B.shape[1]), dtype=cupy.float32)
        c.data.memset_async(0xFF, c.nbytes)  # NaNs where cuBLAS writes nothing (no kernel to build)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()

        def launches(count: int) -> float:
            hold_queue(cupy)  # as the kernels' own samples: the start event fires with the work
            start.record()
            for _ in range(count):
                cupy.matmul(a, b, out=c)
            end.record()
            end.synchronize()
            return cupy.cuda.get_elapsed_time(start, end)

        def once() -> float:
            return launches(1)

        once()  # first call: handle creation and algorithm selection, never timed
        flush = None
        if flush_l2:  # the same cold start as the kernel's samples, on cuBLAS's device
            l2 = cupy.cuda.runtime.getDeviceProperties(device_id)["l2CacheSize"]
            scratch = cupy.empty(max(2 * l2, 64 << 20) // 4, dtype=cupy.float32)
            flush = lambda: scratch.fill(0)  # noqa: E731
        samples, notes = steady_samples(once, warmup, repeats, label, flush)
        if energy is not None and "noisy" not in notes:
            with timed_window():
                spent = energy(launches, float(np.median(samples)))
            notes = {**notes, "energy": spent}
        return samples, cupy.asnumpy(c), notes


def blas_threads() -> int:
    """BLAS threads the host can honour now: its cores (those this process may use) less the
    ones other work keeps busy (the 1-minute load average, less this process's own share).
    Threads beyond that wait on each other: on a 2-core host with other work running, numpy's
    multi-threaded BLAS measured about 2 GFLOPS, against 185 when it ran alone."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    busy = os.getloadavg()[0] - 1.0 if hasattr(os, "getloadavg") else 0.0
    return max(1, min(cores, cores - int(round(max(0.0, busy)))))


# A baseline whose median is not known to within NOISE_LIMIT (runner/config/measurement.py) is
# measured again until it is, for up to NOISY_RETRY_S; if it still is not, no % of the vendor is
# recorded against it and it is never reused.
NOISY_RETRY_S = 2.0


def steady_samples(once, warmup, repeats, label: str,
                   before_each=None) -> tuple[list[float], dict]:
    """A baseline's samples, measured again (adaptively, to NOISE_LIMIT) when they are noisy;
    the notes say when they stayed noisy (recorded as vendor.<note> tags)."""
    samples = measure(once, warmup, repeats, label, before_each)
    notes = {}
    if median_noise(samples) > NOISE_LIMIT:
        first = median_noise(samples)
        count = repeats.repeats if isinstance(repeats, Repetitions) else int(repeats)
        again = Repetitions(max(count, 10), NOISE_LIMIT, 0.0, NOISY_RETRY_S)
        samples = measure(once, warmup, again, f"{label} (again: noisy)", before_each)
        if median_noise(samples) > NOISE_LIMIT:
            notes["noisy"] = (f"its median known to ±{first:.1%}, then ±{median_noise(samples):.1%}"
                              f" after {len(samples)} more samples, against a limit of "
                              f"±{NOISE_LIMIT:.0%}: no % of it is recorded and it is not reused")
    return samples, notes


def host_disturbed(host: Optional[HostState], threads: int) -> str:
    """Why a baseline that ran `threads` threads on the host's CPUs was disturbed, in words; ""
    where it was not, or where the counters could not tell (`host` None or unknown).

    Disturbed where other processes left it fewer cores than its threads: their use reached
    the cores it did not need plus the margin a kernel's timing is `host shared` from
    (host_state.shared_threshold: the counters' error and a host's daemons, a quarter core on
    a small host). On 2 cores, a 2-thread BLAS is disturbed from 0.25 core of others' use (its
    threads wait on each other: 40 to 365 times as long), a 1-thread one from 1.25."""
    if host is None or host.other_cpu_cores is None or host.cpu_cores is None:
        return ""
    bound = max(0, host.cpu_cores - threads) + shared_threshold(host.cpu_cores)
    if host.other_cpu_cores < bound:
        return ""
    return (f"other processes used {host.other_cpu_cores:.2f} of {host.cpu_cores} CPU cores "
            f"while its {threads} thread{'s' if threads != 1 else ''} ran (disturbed from "
            f"{bound:.2f}): no % of it is recorded and it is not reused")


def _disturbed_note(host: Optional[HostState], threads: int) -> dict:
    why = host_disturbed(host, threads)
    return {"disturbed": why} if why else {}


def numpy_sgemm(A: np.ndarray, B: np.ndarray, warmup,
                repeats) -> tuple[list[float], np.ndarray, dict]:
    """numpy's BLAS with as many threads as the host can honour, measured again when its
    samples are noisy; the notes say how many threads, whether it stayed noisy and whether
    other processes disturbed it (host_disturbed)."""
    from threadpoolctl import threadpool_limits

    out = np.empty((A.shape[0], B.shape[1]), dtype=np.float32)

    def once() -> float:  # host BLAS is synchronous: the host clock is its event
        start = time.perf_counter()
        np.matmul(A, B, out=out)
        return (time.perf_counter() - start) * 1e3

    threads = blas_threads()
    with threadpool_limits(limits=threads, user_api="blas"), HostMonitor() as host:
        once()
        samples, notes = steady_samples(once, warmup, repeats, "numpy SGEMM")
    return samples, out, {"blas_threads": str(threads), **notes,
                          **_disturbed_note(host, threads)}


# Per backend object, never per id(): a new backend may reuse a gone one's address.
_measured: "weakref.WeakKeyDictionary[Backend, dict[tuple, Optional[VendorResult]]]" = \
    weakref.WeakKeyDictionary()
_measured_tf32: "weakref.WeakKeyDictionary[Backend, dict[tuple, VendorResult]]" = \
    weakref.WeakKeyDictionary()


def vendor_baseline(backend: Backend, plan: KernelPlan, problem: Problem, buffers: dict,
                    timing_cfg, check_cfg, seed: int,
                    energy: Optional[EnergyProbe] = None) -> Optional[VendorResult]:
    """The baseline for this problem, measured once per backend, size, seed and settings in a
    process: the jobs of a sweep that share a size share one measurement of the library (and a
    TF32 step's jobs one measurement of cuBLAS in TF32 mode besides). With `energy` (cuBLAS
    only), its work per joule over a span of launches as well."""
    operation = plan.operation
    shape = tuple(array.shape for array in problem.inputs.values())
    # Not the tolerance: it decides whether a result passes, not the library's time or error.
    key = (operation, shape, seed, Warmup.of(timing_cfg).key(),
           Repetitions.of(timing_cfg).key(), timing_cfg.flush_l2,
           float(timing_cfg.get("energy_s", 0.0) or 0.0) if energy is not None else 0.0,
           check_cfg.full_reference_max_macs, check_cfg.sample_rows, check_cfg.sample_cols)
    measured, measured_tf32 = (_measured.setdefault(backend, {}),
                               _measured_tf32.setdefault(backend, {}))
    baseline = measured.get(key)
    if baseline is None:
        baseline = _measure_baseline(backend, operation, problem, buffers, timing_cfg,
                                     check_cfg, seed, energy)
        if baseline is None or not baseline.unusable:  # a disturbed one is never reused
            measured[key] = baseline
    device_id = _cuda_device_for(backend) if operation is Operation.sgemm else None
    if baseline is None or plan.precision == "fp32" or device_id is None:
        return baseline
    tf32 = measured_tf32.get(key)
    if tf32 is None:
        A, B = problem.inputs["A"], problem.inputs["B"]
        samples, C, notes = cublas_sgemm(A, B, device_id, Warmup.of(timing_cfg),
                                         Repetitions.of(timing_cfg), timing_cfg.flush_l2,
                                         tf32=True, energy=energy)
        spent = notes.pop("energy", None)
        tf32 = VendorResult("cuBLAS TF32 (CuPy, CUBLAS_COMPUTE_32F_FAST_TF32)", samples,
                            _rel_error(A, B, C, check_cfg, seed), notes=notes, energy=spent)
        if "noisy" not in notes:
            measured_tf32[key] = tf32
    return dataclasses.replace(baseline, tf32=tf32)


def _measure_baseline(backend: Backend, operation: Operation, problem: Problem, buffers: dict,
                      timing_cfg, check_cfg, seed: int,
                      energy: Optional[EnergyProbe] = None) -> Optional[VendorResult]:
    warmup, repeats = Warmup.of(timing_cfg), Repetitions.of(timing_cfg)  # fixed or adaptive
    if operation is not Operation.sgemm:
        nbytes = problem.inputs["src"].nbytes
        destination = backend.alloc(problem.inputs["src"].size)
        source = buffers["src"]
        backend.device_copy(destination, source, nbytes)
        backend.synchronize()
        def copies(count: int) -> float:
            return backend.time_ms(lambda: [backend.device_copy(destination, source, nbytes)
                                            for _ in range(count)])

        on_host = backend.device_info().device_type == "cpu"  # a CPU device: the host's CPUs
        with (HostMonitor() if on_host else nullcontext()) as host:
            samples, notes = steady_samples(lambda: copies(1), warmup, repeats, "device copy",
                                            backend.flush_cache if timing_cfg.flush_l2 else None)
        notes = {**notes, **_disturbed_note(host, 1)}  # PoCL copies in one of its threads
        spent = energy(copies, float(np.median(samples))) \
            if energy is not None and "noisy" not in notes else None
        return VendorResult(f"{backend.name} device-to-device copy", samples,
                            device="the kernel's own device", notes=notes, energy=spent)

    A, B = problem.inputs["A"], problem.inputs["B"]
    device_id = _cuda_device_for(backend)
    notes = {}
    if device_id is not None:
        samples, C, notes = cublas_sgemm(A, B, device_id, warmup, repeats, timing_cfg.flush_l2,
                                         energy=energy)
        name = "cuBLAS SGEMM (CuPy, TF32 off)"
        where = cuda_device_label(device_id)
    elif backend.device_info().device_type == "cpu":
        samples, C, notes = numpy_sgemm(A, B, warmup, repeats)
        name = "numpy SGEMM (host BLAS)"
        where = "host CPU"
    else:
        return None  # no vendor library known for this device: absent, not invented
    spent = notes.pop("energy", None)
    return VendorResult(name, samples, _rel_error(A, B, C, check_cfg, seed), device=where,
                        notes=notes, energy=spent)


def _rel_error(A: np.ndarray, B: np.ndarray, C: np.ndarray, check_cfg, seed: int) -> float:
    """The library's error against the float64 reference the kernel is checked with."""
    return check_sgemm(A, B, C, check_cfg.tolerance, check_cfg.full_reference_max_macs,
                       check_cfg.sample_rows, check_cfg.sample_cols, seed).rel_error
