"""A sweep's CUDA programs compiled ahead of its jobs, in a pool of processes beside them.

NVRTC takes 0.3-1.8 s a program (matmul_9's unrolled tiles the most), which a sweep's jobs
paid one after another. Hydra hands a launcher each batch of jobs whole (a grid sweep: all of
them; an Optuna search: `hydra.sweeper.n_jobs` trials), so gemmlab's launcher
(hydra_plugins/gemmlab_launcher) composes the batch's configs, and while the first job runs,
this pool compiles the programs of the others into the compile cache on disk
(runner/backends/nvrtc.py): a job then finds its program there, or waits for the pool's compile
of it to end where that has begun (the cache's lock). The first job's program is compiled by
a thread of its worker, beside the job's inputs and baseline (runner/run/ahead.py). A CUDA
sweep whose batches can use them starts the pool's first processes as it starts (`prestart`;
runner/sweep/definition.py, compiles_ahead), so that their start, their imports and NVRTC's load
are done by the time the batch's programs come. Nothing else changes:
the job still compiles through the same call (a cache miss, a compile that failed in the pool, a
pool that was not started, all compile in the job as before, under its time limit), so every
check and every record stays as it was. The pool is stopped when the batch ends.
"""

import contextlib
import logging
import os
import signal
import threading
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Callable, Optional, Sequence

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


def _compile(request: CompileRequest, capability: Optional[int] = None,
             on_compiled: Callable[[], None] = lambda: None) -> None:
    """In a pool process (or the worker's thread, `compile_ahead`): the job's compile call,
    whose output lands in the compile cache (then `on_compiled()`), and the cubin's disassembly
    where the run will inspect it (runner/inspect/program.py), its lock taken before the
    program's entry is written, so the job starts as soon as the program is there and its
    inspection waits for this SASS. With the compute capability given (NVML's, `_nvml_gpus`),
    the process never starts CUDA."""
    from runner.backends.driver_env import disable_compute_cache
    from runner.backends.nvrtc import compile_cuda

    disable_compute_cache()  # before the compute capability's CuPy can load NVRTC
    with contextlib.ExitStack() as held:
        while_held = None
        if request.disassemble:
            from runner.inspect.program import disassemble, sass_lock

            def while_held(output) -> None:
                held.enter_context(sass_lock(output.cubin))

        output = compile_cuda(request.source, request.source_name, dict(request.defines),
                              capability or _compute_capability(request.device),
                              request.max_registers, request.include_dirs,
                              name_expressions=request.entries, while_held=while_held)
        on_compiled()
        if request.disassemble:
            disassemble(output.cubin, lock_held=True)


def compile_ahead(request: CompileRequest) -> threading.Event:
    """A batch's first program, compiled in a thread of the job's own worker while the worker
    prepares the job's inputs and baseline (runner/run/ahead.py; NVRTC lets go of the GIL), into
    the compile cache, where its job finds it. The event is set once the program's entry is
    there, or the compile failed (its job compiles and says why); its SASS follows, under its
    lock, which the job's inspection waits for."""
    from runner.backends.nvrtc import cache_folder

    compiled = threading.Event()
    if cache_folder() is None:
        compiled.set()
        return compiled
    capability = _compute_capability(request.device)  # this thread has the device open

    def run() -> None:
        try:
            _compile(request, capability, on_compiled=compiled.set)
        except Exception as error:  # its job compiles it and reports what fails
            log.debug("%s was not compiled ahead: %s", request.source_name, error)
        finally:
            compiled.set()

    threading.Thread(target=run, name="compile-ahead", daemon=True).start()
    return compiled


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


# Processes started with a CUDA sweep (`prestart`): two, for the programs of the jobs after the
# first, which come together; the pool starts more as more programs come.
PRESTARTED = 2

# The pool started with the sweep, and the compute capability NVML gave, until a batch takes it.
_prestarted: Optional[tuple[ProcessPoolExecutor, Optional[int]]] = None


def _new_pool() -> ProcessPoolExecutor:
    workers = min(MAX_WORKERS, max(1, (os.cpu_count() or 2) - 2))
    log.debug("compiling programs ahead of their jobs in up to %d processes", workers)
    return ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                               initializer=_deaf_to_ctrl_c)


def _deaf_to_ctrl_c() -> None:
    """A pool process ignores the terminal's Ctrl-C (its whole process group gets it): the
    sweep's process handles it and stops the pool, and an idle process would print a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _loaded() -> None:
    """In a process the pool starts ahead: what a compile imports and loads, done now."""
    from runner.backends.driver_env import disable_compute_cache

    disable_compute_cache()
    from runner.backends.nvrtc import _compiler_identity
    from runner.inspect.program import _sass_cache_path

    _compiler_identity()  # NVRTC loaded, its version asked
    _sass_cache_path(b"")  # the disassemblers found


def prestart(backend_name: str) -> None:
    """At a CUDA sweep's start (runner/sweep/callback.py), while its process imports MLflow: the
    pool's first processes started and loaded, for its first batch's Precompiler. Nothing
    without a compile cache or a GPU that NVML sees."""
    global _prestarted
    from runner.backends.nvrtc import cache_folder

    if _prestarted is not None or backend_name != "cuda" or cache_folder() is None:
        return
    count, capability = _nvml_gpus()
    if not count:
        return
    pool = _new_pool()
    for _ in range(PRESTARTED):
        pool.submit(_loaded)
    _prestarted = pool, capability


def stop_prestarted() -> None:
    """A pool started with the sweep that no batch took (the sweep ended before it launched)."""
    global _prestarted
    if _prestarted is not None:
        pool, _prestarted = _prestarted[0], None
        _stop(pool)


def _stop(pool: ProcessPoolExecutor) -> None:
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:  # a compile in flight: its job is over or never comes
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)


class Precompiler:
    """The pool for one batch: `Precompiler(requests)` starts compiling every request but the
    first (its worker compiles that one, at once), each program once; `submit(request)` adds
    a job's request as it comes (gemmlab's launcher composes a GPU batch's later jobs in the
    background); `close()` stops it. It takes the pool started with the sweep (`prestart`)
    where there is one; its processes otherwise start as the requests come."""

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
        global _prestarted
        with self._lock:
            if request is None or request == self._first or request in self._seen \
                    or self._closed:
                return
            self._seen.add(request)
            if self._pool is None:
                if _prestarted is not None:
                    (self._pool, self._capability), _prestarted = _prestarted, None
                    self._gpus = True
                if self._gpus is None:
                    count, self._capability = _nvml_gpus()
                    self._gpus = count > 0
                if not self._gpus:
                    return
                if self._pool is None:
                    self._pool = _new_pool()
            self._pool.submit(_compile, request, self._capability)

    def close(self) -> None:
        """Stop: what was not compiled yet is compiled by its job, if it runs at all."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            _stop(pool)

    def __enter__(self) -> "Precompiler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
