"""A sweep's CUDA programs compiled ahead of its jobs, in a pool of processes beside them.

NVRTC takes 0.3-1.8 s a program (matmul_9's unrolled tiles the most), which a sweep's jobs
paid one after another. Hydra hands a launcher each batch of jobs whole (a grid sweep: all of
them; an Optuna search: `hydra.sweeper.n_jobs` trials), so gemmlab's launcher
(hydra_plugins/gemmlab_launcher) composes the batch's configs, and while the first job runs,
this pool compiles the programs of the others into the compile cache on disk
(runner/backends/nvrtc.py): a job then finds its program there, or waits for the pool's compile
of it to end where that has begun (the cache's lock). The first job's program is compiled by
its worker, while the sweep's process sets the job up (runner/run/ahead.py): given to the pool
too, it gained nothing measurable on an H100 (docs/methodology.md). Nothing else changes: the
job still compiles through the same call (a cache miss, a compile that failed in the pool, a
pool that was not started, all compile in the job as before, under its time limit), so every
check and every record stays as it was. The pool is stopped when the batch ends.
"""

import logging
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Optional, Sequence

log = logging.getLogger("runner")

MAX_WORKERS = 8  # NVRTC is single-threaded; more processes than this gained nothing measurable


@dataclass(frozen=True)
class CompileRequest:
    """What a job's compile call gets (runner/run/execute.py, prepare; CUDABackend.compile)."""
    source: str
    source_name: str
    defines: tuple  # (name, value) in the plan's order
    max_registers: Optional[int]
    include_dirs: tuple
    entries: tuple
    device: int
    disassemble: bool = False  # tracking.inspect: the SASS for the record, cached beside it


def request_of(cfg, overrides: Sequence[str]) -> Optional[CompileRequest]:
    """The compile a CUDA job will ask for, as its run derives it (size rules, plan, source
    with include_first); None for another backend or a job its own run will refuse."""
    from runner.config.paths import (
        kernel_source_path,
        kernel_source_text,
        source_file_name,
    )
    from omegaconf import OmegaConf

    from runner.config.size_rules import apply_size_rules, pinned_params
    from runner.config.spec import ProblemSize, plan_kernel

    try:
        if cfg.backend.name != "cuda":
            return None
        # A copy (the job's own config stays as composed: its run applies the rules), without
        # Hydra's own node, which is most of a composed config and of the time copying it.
        cfg = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])
        apply_size_rules(cfg, pinned_params(list(overrides)))
        plan = plan_kernel(cfg.kernel, ProblemSize(cfg.m, cfg.n, cfg.k))
        file_name = source_file_name(cfg.kernel, "cuda")
        path = kernel_source_path("cuda", file_name, cfg.kernel_dirs)
        source = kernel_source_text(path, plan.include_first.get("cuda", ()))
        device = cfg.backend.get("device")
        return CompileRequest(source, file_name, tuple(plan.defines.items()), plan.max_registers,
                              (str(path.parent),), tuple(plan.entries),
                              int(device) if device is not None else 0,
                              bool(cfg.tracking.get("inspect", True)))
    except Exception:  # the job's own run says what is wrong, in its record
        return None


def _compile(request: CompileRequest, capability: Optional[int] = None) -> None:
    """In a pool process: the job's compile call, whose output lands in the compile cache, and
    the cubin's disassembly where the run will inspect it (runner/inspect/program.py). With the
    compute capability given (NVML's, `_nvml_gpus`), the process never starts CUDA."""
    from runner.backends.driver_env import disable_compute_cache
    from runner.backends.nvrtc import compile_cuda

    disable_compute_cache()  # before the compute capability's CuPy can load NVRTC
    while_held = None
    if request.disassemble:
        from runner.inspect.program import disassemble

        def while_held(output) -> None:  # a job waiting for the program finds its SASS too
            disassemble(output.cubin)
    compile_cuda(request.source, request.source_name, dict(request.defines),
                 capability or _compute_capability(request.device), request.max_registers,
                 request.include_dirs, name_expressions=request.entries, while_held=while_held)


def compile_ahead(request: CompileRequest) -> None:
    """A batch's first program, compiled in the job's own worker while the sweep's process
    sets the job up (runner/run/ahead.py): into the compile cache, where its job finds it."""
    from runner.backends.nvrtc import cache_folder

    if cache_folder() is not None:
        _compile(request)


_capabilities: dict = {}


def _compute_capability(device: int) -> int:
    if device not in _capabilities:
        import cupy

        properties = cupy.cuda.runtime.getDeviceProperties(device)
        _capabilities[device] = int(properties["major"]) * 10 + int(properties["minor"])
    return _capabilities[device]


def _nvml_gpus() -> tuple[int, Optional[int]]:
    """How many GPUs NVML sees, and their compute capability (major * 10 + minor) where they
    all share one, without starting CUDA in the sweep's own process; (0, None) without NVML.
    A pool process given that capability compiles without CuPy's CUDA runtime and context:
    about a second at its start, and GPU memory it would hold for nothing."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
            capabilities = set()
            for index in range(count):
                try:
                    major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(
                        pynvml.nvmlDeviceGetHandleByIndex(index))
                    capabilities.add(int(major) * 10 + int(minor))
                except pynvml.NVMLError:
                    capabilities.add(None)  # unknown: the pool asks CUDA, device by device
            shared = capabilities.pop() if len(capabilities) == 1 else None
            return count, shared
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return 0, None


class Precompiler:
    """The pool for one batch: `Precompiler(requests)` starts compiling every request but the
    first (its worker compiles that one, at once), each program once; `submit(request)` adds
    a job's request as it comes (gemmlab's launcher composes a GPU batch's later jobs in the
    background); `close()` stops it. The pool's processes start as the requests come."""

    def __init__(self, requests: Sequence[Optional[CompileRequest]]):
        from runner.backends.nvrtc import cache_folder

        self._pool = None
        self._lock = threading.Lock()
        self._first = requests[0] if requests else None
        self._seen: set = set()
        self._closed = cache_folder() is None  # nothing to compile into
        self._gpus: Optional[bool] = None  # NVML asked once, at the first request to compile
        self._capability: Optional[int] = None  # theirs, where they share one
        for request in requests[1:]:
            self.submit(request)

    def submit(self, request: Optional[CompileRequest]) -> None:
        """Compile `request` in the pool unless it is the first job's, or already asked for;
        nothing once the pool is closed, or without a GPU to compile for."""
        with self._lock:
            if request is None or request == self._first or request in self._seen \
                    or self._closed:
                return
            self._seen.add(request)
            if self._pool is None:
                if self._gpus is None:
                    count, self._capability = _nvml_gpus()
                    self._gpus = count > 0
                if not self._gpus:
                    return
                workers = min(MAX_WORKERS, max(1, (os.cpu_count() or 2) - 2))
                self._pool = ProcessPoolExecutor(max_workers=workers,
                                                 mp_context=get_context("spawn"))
                log.debug("compiling programs ahead of their jobs in up to %d processes", workers)
            self._pool.submit(_compile, request, self._capability)

    def close(self) -> None:
        """Stop: what was not compiled yet is compiled by its job, if it runs at all."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:  # a compile in flight: its job is over or never comes
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=5)

    def __enter__(self) -> "Precompiler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
