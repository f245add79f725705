"""A sweep's next job, prepared in the worker while the sweep's own process sets it up.

Between two jobs the worker waits while the sweep's process ends one job's record and composes,
opens and sends the next (0.2-0.3 s a job on an H100 host). gemmlab's launcher tells the
supervisor which job comes next; as soon as a job ends the supervisor sends that config to the
worker (`("ahead", cfg)`), which does the parts of the job that do not depend on its kernel,
through the calls and caches the job itself uses: the inputs drawn (make_problem), their float64
reference, the buffers uploaded between their guards, and on a GPU the vendor library's
baseline. The job then finds them ready. A batch's first job is sent to the worker as soon as
it is composed, with its program, which a thread compiles beside those parts (the compile pool
takes the others), and at the start of a sweep the worker opens the device (`warm_up`) while
MLflow is imported.

On a GPU the job after next does not wait for its ahead either: its inputs and their float64
reference, host work alone, are drawn in a thread of the worker while the job before it runs
(`draw_ahead`, sent with that job): between two jobs only 0.1-0.3 s is free, and at 8192 the
inputs and reference alone take about a second. Never on a CPU device, whose cores time the
kernel.

Nothing is checked or measured differently: the kernel's launches all happen in its job, and
the baseline is the one that job would have measured (vendor_baseline, once per problem and
settings in a worker either way). On a CPU device the baseline stays in the job: there the
sweep's process would share the CPUs with it. A job that does not come (refused, a measurement
reused, an interrupted sweep) leaves its buffers to the end of the next job, which drops them;
anything that fails here is done again by the job, which says what failed.
"""

import logging
import threading
from typing import Optional

log = logging.getLogger(__name__)

# Staged buffers are a second copy of a job's inputs on the device next to the last job's
# (still in CuPy's pool): staged only while they take at most this share of its memory.
STAGE_SHARE = 0.25


# The thread drawing a coming job's inputs (draw_ahead), and which problem it draws.
_drawing: Optional[threading.Thread] = None
_drawing_key: Optional[tuple] = None


def _problem_key(cfg) -> tuple:
    return (int(cfg.m), int(cfg.n), int(cfg.k), int(cfg.seed))


def draw_ahead(cfg) -> None:
    """`cfg`'s inputs and their float64 reference drawn in a thread while the job before it
    runs (make_problem and prepare_reference, which keep them for that job): on a GPU only,
    and not for a job with a worker or a GPU of its own."""
    global _drawing, _drawing_key
    finish_drawing()
    if cfg.check.get("sanitizer") or cfg.get("gpus", 0):
        return
    try:
        from runner.backends import make_backend

        if make_backend(cfg.backend).device_info().device_type == "cpu":
            return
    except Exception as error:  # the job opens the device itself and says what fails
        log.debug("nothing drawn ahead of %s: %s", cfg.kernel.get("name"), error)
        return
    _drawing_key = _problem_key(cfg)
    _drawing = threading.Thread(target=_draw, args=(cfg,), name="draw-ahead", daemon=True)
    _drawing.start()


def finish_drawing(cfg=None) -> None:
    """Wait for the inputs being drawn ahead: for any (no `cfg`), or only where they are
    `cfg`'s, which its job is about to draw itself (the same arrays, not twice at once)."""
    global _drawing, _drawing_key
    if _drawing is None or (cfg is not None and _problem_key(cfg) != _drawing_key):
        return
    _drawing.join()
    _drawing, _drawing_key = None, None


def _draw(cfg) -> None:
    from runner.config.spec import ProblemSize, plan_kernel
    from runner.run.limits import check_host_memory
    from runner.run.operations import (
        effective_check,
        make_problem,
        operation_floats,
        prepare_reference,
    )
    from runner.run.timing import outside_timed_windows

    try:
        plan = plan_kernel(cfg.kernel, ProblemSize(cfg.m, cfg.n, cfg.k))
        check_host_memory(plan, operation_floats(plan.operation, plan.size))
        problem = make_problem(plan.operation, plan.size, cfg.seed, plan.blas_beta != 0.0)
        outside_timed_windows()  # the reference's BLAS takes every core: not while timing
        prepare_reference(problem, effective_check(cfg), cfg.seed)
    except Exception as error:  # the job draws them itself and reports what fails
        log.debug("inputs of %s not drawn ahead: %s", cfg.kernel.get("name"), error)


def warm_up(backend_cfg: dict) -> None:
    """At a sweep's start, while its process imports MLflow and composes the jobs: the run's
    modules imported and the device opened (CuPy and the CUDA context, or the OpenCL context)
    as the jobs' make_backend will ask for it."""
    try:
        from omegaconf import OmegaConf

        import runner.run.execute  # noqa: F401  (numpy, the pipeline)
        from runner.backends import make_backend

        make_backend(OmegaConf.create(backend_cfg)).device_info()
    except Exception as error:  # the first job opens it and says what fails
        log.debug("the device was not opened ahead of the sweep: %s", error)


def prepare_ahead(cfg, compile_request=None) -> dict[str, float]:
    """Prepare what `cfg`'s job shares with no kernel, and with `compile_request` (a batch's
    first job, which the compile pool leaves to its own job) its program too. The seconds it
    took: `ahead` in all, and `ahead/<part>` for each part (AHEAD_PARTS) that took any."""
    from runner.run.phases import AHEAD, PhaseClock

    clock = PhaseClock()
    compiled = None
    if compile_request is not None:
        clock.enter("compile")
        try:  # in a thread, beside the parts below
            # why up a floor: the sweep's compile pool's own compile, in this worker's thread
            from runner.sweep.precompile import compile_ahead

            compiled = compile_ahead(compile_request)
        except Exception as error:  # its job compiles it and reports what fails
            log.debug("%s was not compiled ahead: %s", cfg.kernel.get("name"), error)
    clock.enter("draw")
    finish_drawing()  # its inputs, drawn while the job before it ran
    try:
        _prepare(cfg, clock.enter)
    except Exception as error:  # the job does it again and reports what fails
        log.debug("nothing prepared ahead of %s: %s", cfg.kernel.get("name"), error)
    if compiled is not None:
        clock.enter("compile")
        compiled.wait()  # the program's entry (its SASS follows; the job's inspection waits)
    clock.stop()
    seconds = {f"{AHEAD}/{part}": spent for part, spent in clock.seconds.items()}
    return {AHEAD: sum(clock.seconds.values()), **seconds}


# The parts of the work ahead, each recorded as time_s/ahead/<part>: the wait for the inputs
# drawn in the thread; inputs and reference (where the thread did not draw them); the uploads
# into guarded buffers; the vendor library's baseline; the first job's program (compiled in a
# thread from the start: the wait for it after the parts before).
AHEAD_PARTS = ("draw", "inputs", "upload", "vendor", "compile")


def _prepare(cfg, enter=lambda part: None) -> None:
    from runner.backends import make_backend
    from runner.config.schema import Operation
    from runner.config.spec import ProblemSize, plan_kernel
    from runner.run.guards import drop_staged, stage_alloc, stage_upload
    from runner.run.limits import check_host_memory
    from runner.run.operations import (
        effective_check,
        make_problem,
        operation_floats,
        prepare_reference,
    )
    from runner.run.vendor import vendor_baseline
    from runner.terminal import progress as progress_bars

    progress_bars.forward_to(lambda message: None)  # no job to draw them under; its run resets
    if cfg.check.get("sanitizer") or cfg.get("gpus", 0):
        return  # a worker of its own under the tool, or a GPU claimed when the job starts
    enter("inputs")
    plan = plan_kernel(cfg.kernel, ProblemSize(cfg.m, cfg.n, cfg.k))
    backend = make_backend(cfg.backend)
    device = backend.device_info()
    floats = operation_floats(plan.operation, plan.size)
    check_host_memory(plan, floats)  # Refused: too large to keep a second problem
    problem = make_problem(plan.operation, plan.size, cfg.seed, plan.blas_beta != 0.0)
    check_cfg = effective_check(cfg)
    prepare_reference(problem, check_cfg, cfg.seed)
    if sum(floats.values()) * 4 <= STAGE_SHARE * device.global_memory_bytes:
        enter("upload")
        drop_staged()
        for array in (*problem.inputs.values(), *problem.initial.values()):
            stage_upload(backend, array, array.shape[-1])
        if not problem.initial:
            rows, cols = problem.output_shape
            stage_alloc(backend, rows * cols, cols)
    if device.device_type != "cpu" and plan.operation is Operation.sgemm:
        from runner.run.gpu_state import energy_probe, nvml_handle

        enter("vendor")
        gpu = nvml_handle(device.uuid, device.pci_address) if device.is_nvidia_gpu else None
        vendor_baseline(backend, plan, problem, {}, cfg.timing, check_cfg, cfg.seed,
                        energy_probe(gpu, float(cfg.timing.get("energy_s", 0.0) or 0.0)))
