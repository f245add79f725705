"""One run: compile with defines, check limits, verify one launch, time, run the vendor baseline.

Backend-agnostic and kernel-agnostic: everything kernel-specific comes from the plan.
Everything learnt along the way goes to the recorder at once, so a run that fails halfway is
still recorded with what it had.

`execute` runs the stages in order, each announced to `on_phase` (runner/run/phases.py); their
work lives beside this module: the program compiled and bound (kernel_program.py, put together
by `prepare` here), the checked launches (verify.py), the timing (timing.py), the vendor
baseline (vendor.py) and what is recorded beside the time (figures.py). The inspection (PTX,
SASS) is made here, in a thread beside the check (`BackgroundInspection`).
"""

import dataclasses
import logging
import threading
import time
import weakref
from concurrent.futures import Future, TimeoutError as FutureTimeout
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from runner.backends.base import Backend, DeviceInfo, KernelResources
from runner.backends.includes import local_includes
from runner.config.measurement import Repetitions, Warmup
from runner.config.paths import kernel_source_path, kernel_source_text
from runner.config.spec import OPERATION_BUFFERS, KernelPlan, TensorMapArg, entry_label
from runner.errors import Refused, RunError, VerificationError
from runner.record import names
from runner.run.figures import (
    finite,
    judge_against_ceiling,
    record_energy,
    record_gpu_state,
    record_vendor,
    repeated,
    resource_metrics,
    samples_text,
)
from runner.run.gpu_state import GpuState, Monitor, energy_probe, nvml_handle
from runner.run.guards import GUARD_UNIT_FLOATS, compared_on_device, guarded_alloc, guarded_upload
from runner.run.host_state import HostMonitor, HostState
from runner.run.kernel_program import (
    PreparedRun,
    bind_tensor_map,
    check_overlap_waits,
    check_signatures,
    compile_once,
    program_key,
    scalar_value,
    source_with_defines,
)
from runner.run.limits import (
    check_device_support,
    check_host_memory,
    check_kernel_limits,
    check_launch_limits,
    check_memory,
)
from runner.run.operations import (
    CheckResult,
    Problem,
    clear_caches,
    effective_check,
    make_problem,
    operation_floats,
)
from runner.run.timing import Samples, TimeStats, measure, timed_window
from runner.run.vendor import VendorResult, vendor_baseline
from runner.run.verify import check_timed_launches, checked_launch

log = logging.getLogger(__name__)
CLEAN_RETRY_PAUSE_S = 10.0  # timing.require_clean: how long a busy GPU gets to settle
# A run that fails while its inspection (made beside the check) is still running waits this long
# for it, so that a failed run keeps its PTX and SASS as before, then fails without it.
INSPECT_GRACE_ON_FAILURE_S = 5.0


@dataclass
class RunOutcome:
    plan: KernelPlan
    device: DeviceInfo
    resources: dict[str, KernelResources]
    check: CheckResult
    stats: Optional[TimeStats]  # None under a sanitizer (check.sanitizer)
    vendor: Optional[VendorResult]
    vendor_stats: Optional[TimeStats]
    metrics: dict[str, Optional[float]]
    gpu: Optional[GpuState] = None  # what NVML saw during the timed launches (NVIDIA GPUs)
    host: Optional[HostState] = None  # other processes' CPU use during them (CPU devices)

    @property
    def main_resources(self) -> KernelResources:
        """The resources of the function the step is about (not a pre- or post-pass)."""
        return self.resources[self.plan.main_launch.entry]


# Per backend object, as the programs are (kernel_program.py).
_inspections: "weakref.WeakKeyDictionary[Backend, dict[tuple, dict[str, str]]]" = \
    weakref.WeakKeyDictionary()


def inspect_once(backend: Backend, prepared: "PreparedRun", plan: KernelPlan) -> dict[str, str]:
    """The inspection files of a compiled program (runner/inspect/program.py: summary.md, PTX, SASS
    or the build log), made once per program like the program itself. Never fails a run: what
    could not be made is said in summary.md."""
    key = program_key(prepared.source, prepared.file_name, plan.entries, plan.defines,
                       plan.max_registers, prepared.include_dirs)
    inspections = _inspections.setdefault(backend, {})
    if key not in inspections:
        try:
            from runner.inspect.program import inspect_program

            inspections[key] = inspect_program(backend, prepared.source, prepared.file_name,
                                               plan, prepared.program,
                                               prepared.include_dirs).files
        except Exception as error:  # a missing or failing tool is a note, not a failed run
            inspections[key] = {"summary.md": f"# {plan.name}: no inspection\n\n"
                                              f"{type(error).__name__}: {error}\n"}
    return inspections[key]


class BackgroundInspection:
    """`inspect_once` in a thread of its own, started as soon as the program is compiled, so
    that PTX, SASS (an nvdisasm process) and their parsing go on beside the uploads and the
    check instead of before them. `record` waits for it and records its files; it must be
    called before any timed launch: the inspection's Python holds the GIL, and a timed launch
    whose thread waits for it (5 ms, Python's switch interval) would be timed with that gap."""

    def __init__(self, backend: Backend, prepared: "PreparedRun", plan: KernelPlan):
        self.plan = plan
        self.future: Future = Future()
        self.recorded = False
        self.thread = threading.Thread(target=self._inspect, args=(backend, prepared, plan),
                                       name=f"inspect {plan.name}", daemon=True)
        self.thread.start()

    def _inspect(self, backend: Backend, prepared: "PreparedRun", plan: KernelPlan) -> None:
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            self.future.set_result(inspect_once(backend, prepared, plan))
        except BaseException as error:  # kept for `files`, never lost in the thread
            self.future.set_exception(error)

    def done(self) -> bool:
        return self.future.done()

    def files(self, timeout: Optional[float] = None) -> dict[str, str]:
        """The inspection's files; what went wrong in the thread, as its summary (an
        inspection never fails a run). FutureTimeout if it takes longer than `timeout`."""
        try:
            return self.future.result(timeout)
        except FutureTimeout:
            raise
        except Exception as error:
            log.warning("%s: the inspection failed: %s: %s", self.plan.name,
                        type(error).__name__, error)
            return {"summary.md": f"# {self.plan.name}: no inspection\n\n"
                                  f"{type(error).__name__}: {error}\n"}

    def record(self, recorder, timeout: Optional[float] = None) -> None:
        """Wait for the files (FutureTimeout after `timeout`) and record them, once."""
        files = self.files(timeout)
        if not self.recorded:
            self.recorded = True
            for name, text in files.items():
                recorder.text(text, f"inspect/{name}")

    def record_after_failure(self, recorder, on_phase: Callable[[str], None],
                             grace_s: Optional[float] = None) -> None:
        """The run failed: record the files if they come within `grace_s`
        (INSPECT_GRACE_ON_FAILURE_S), else drop them (said in the log). Never raises: the
        run's own error is what the job reports."""
        if self.recorded:
            return
        grace_s = INSPECT_GRACE_ON_FAILURE_S if grace_s is None else grace_s
        try:
            if not self.done():
                on_phase("inspect")  # the time the failed run waits for it
            self.record(recorder, grace_s)
        except FutureTimeout:
            self.future.cancel()
            log.warning("%s: the run failed while its inspection was still running; not "
                        "waiting longer than %g s for it, not recorded", self.plan.name, grace_s)
        except Exception as error:  # recording it failed too: the run's error goes first
            log.warning("%s: the inspection of a failed run was not recorded: %s: %s",
                        self.plan.name, type(error).__name__, error)


def prepare(backend: Backend, sources_cfg, plan: KernelPlan, problem: Problem,
            kernel_dirs: Sequence[str] = (), guards: bool = True,
            on_program: Optional[Callable[[PreparedRun], None]] = None) -> PreparedRun:
    """Compile the plan's source (from the user's `kernel_dirs` first, then the packaged
    kernels) with its defines, upload the inputs, allocate the rest, each buffer between guard
    zones unless `guards` is false (runner/run/guards.py). `on_program` hears the compiled
    program (a PreparedRun with no buffers yet) before anything is uploaded."""
    file_name = sources_cfg.get(backend.name)
    if file_name is None:
        raise Refused(f"{plan.name} has no {backend.name} source")
    if plan.tensor_maps and not backend.tensor_maps:
        raise Refused(f"{plan.name} passes TMA tensor maps ({plan.tensor_maps[0]}), which "
                      f"backend={backend.name} cannot make (CUDA only)")
    path = kernel_source_path(backend.name, file_name, kernel_dirs)
    source = kernel_source_text(path, plan.include_first.get(backend.name, ()))
    check_overlap_waits(plan, backend.name, file_name, source)
    include_dirs = (str(path.parent),)  # files beside the source that it includes
    program = compile_once(backend, source, file_name, plan.entries, plan.defines,
                           plan.max_registers, include_dirs)
    check_signatures(plan, program, file_name, backend.name)
    artifact = source_with_defines(source, program.options, plan.defines)
    headers = {included.name: included.read_text(errors="replace")
               for included in local_includes(source, path.parent)}
    compiled = PreparedRun(file_name, artifact, program, {}, lambda: [], source,
                           include_dirs=include_dirs, headers=headers)
    if on_program is not None:
        on_program(compiled)
    if program.kernels and all(kernel is None for kernel in program.kernels.values()):
        return compiled  # compile-only
    out_rows, out_cols = problem.output_shape
    guarded = {name: guarded_upload(backend, array, array.shape[-1], guards)
               for name, array in problem.inputs.items()}
    initial = problem.initial.get(problem.output_name)
    if initial is not None:  # the kernel reads it: C0 between the guards, not an input
        guarded[problem.output_name] = dataclasses.replace(
            guarded_upload(backend, initial, out_cols, guards), original=None, pristine=None)
    else:
        guarded[problem.output_name] = guarded_alloc(backend, out_rows * out_cols, out_cols,
                                                     guards)
    for name, count in plan.scratch.items():
        guarded[name] = guarded_alloc(backend, count, max(plan.size.M, plan.size.N), guards)
    buffers = {name: buffer.inner for name, buffer in guarded.items()}
    values = {**plan.size.as_names(), **buffers}
    bound = [[values[arg] if isinstance(arg, str) else
              bind_tensor_map(backend, plan, arg, guarded) if isinstance(arg, TensorMapArg) else
              scalar_value(arg) for arg in launch.args]
             for launch in plan.launches]

    def enqueue():
        return [backend.launch(program.kernels[launch.entry], launch.groups, launch.local,
                               args, launch.local_bytes, launch.overlap_previous)
                for launch, args in zip(plan.launches, bound)]

    pristine = {}
    if initial is not None:
        pristine[problem.output_name] = (backend.upload(initial), initial.nbytes)
    return PreparedRun(file_name, artifact, program, buffers, enqueue, source, guarded, plan.name,
                       plan.size.label(plan.operation), pristine,
                       (plan.blas_alpha, plan.blas_beta), include_dirs, headers)


def _no_phase(phase: str) -> None:
    pass


def execute(cfg, backend: Backend, plan: KernelPlan, recorder,
            on_phase: Callable[[str], None] = _no_phase) -> RunOutcome:
    """The run. `on_phase` hears each stage as it starts (runner/run/phases.py, PHASES): the
    worker times each, the job's supervisor gives each its time limit."""
    device = backend.device_info()
    recorder.tags({
        names.DEVICE_NAME: device.name, names.DEVICE_VENDOR: device.vendor,
        names.DEVICE_PLATFORM: device.platform, names.DEVICE_DRIVER: device.driver,
        names.DEVICE_TYPE: device.device_type,
        names.DEVICE_COMPUTE_CAPABILITY: device.compute_capability,
        names.TIMING_LAUNCHES: " + ".join(launch.entry for launch in plan.launches),
    })
    check_device_support(plan, device)
    check_launch_limits(plan, device)
    # Memory is checked before the inputs are drawn: a size too large for the device (or the
    # host) is refused in a moment instead of filling the host's memory first.
    problem_floats = operation_floats(plan.operation, plan.size)
    buffer_floats = {**problem_floats, **plan.scratch}
    if plan.blas_beta != 0.0:  # a pristine copy of C0 to restore C from
        buffer_floats["C0"] = problem_floats["C"]
    if plan.operation.value != "sgemm":
        buffer_floats["baseline copy"] = problem_floats["src"]
    guard = 0 if cfg.check.get("sanitizer") else GUARD_UNIT_FLOATS
    buffer_floats.update({f"{name} copy": problem_floats[name]  # what the input check compares
                          for name in OPERATION_BUFFERS[plan.operation][:-1]
                          if compared_on_device(backend, problem_floats[name], guard)})
    on_phase("inputs")
    check_memory(plan, device, buffer_floats)
    try:
        check_host_memory(plan, problem_floats)
    except Refused:  # refused only if it is short even without earlier jobs' kept problems
        if not clear_caches():
            raise
        check_host_memory(plan, problem_floats)
    problem = make_problem(plan.operation, plan.size, cfg.seed, plan.blas_beta != 0.0)

    on_phase("compile")
    # PTX and SASS for the record (tracking.inspect) are made in a thread from the moment the
    # program is compiled, beside the uploads and the check, and recorded before the timed
    # launches ("inspect": the time the run waits for them there).
    inspection: Optional[BackgroundInspection] = None

    def inspect_in_background(compiled: PreparedRun) -> None:
        nonlocal inspection
        if cfg.tracking.inspect:
            inspection = BackgroundInspection(backend, compiled, plan)

    try:
        # Under a sanitizer the buffers are bare, so that the tool sees their real bounds.
        prepared = prepare(backend, cfg.kernel.sources, plan, problem, cfg.kernel_dirs,
                           guards=not cfg.check.get("sanitizer"), on_program=inspect_in_background)
        recorder.text(prepared.source_artifact, f"source/{prepared.file_name}")
        for header, text in prepared.headers.items():  # what it includes, beside it
            recorder.text(text, f"source/{header}")
        recorder.text(prepared.program.log or "(the compiler printed nothing)\n",
                      "compile_log.txt")
        resources = dict(prepared.program.resources)
        main = plan.main_launch
        metrics = resource_metrics(resources[main.entry], dynamic_local_bytes=main.local_bytes)
        for side, launch in plan.helper_launches():
            metrics.update(resource_metrics(resources[launch.entry],
                                            f"{side}/{entry_label(launch.entry)}/",
                                            launch.local_bytes))
        recorder.metrics(metrics)
        check_kernel_limits(plan, device, resources)

        on_phase("check")
        started = time.perf_counter()  # the kernel's own work: the checked launch and the timing
        check_cfg = effective_check(cfg)  # a reduced-precision step's own tolerance
        check = checked_launch(backend, prepared, problem, check_cfg, cfg.seed)
        metrics[names.CHECK_REL_ERROR] = \
            check.rel_error if check.rel_error == check.rel_error else None
        metrics[names.CHECK_PASSED] = 1.0 if check.passed else 0.0
        recorder.metrics(metrics)
        recorder.tags({names.CHECK_METHOD: check.method})
        if not check.passed:
            raise VerificationError(f"{plan.name} gave a wrong result at "
                                    f"{plan.size.label(plan.operation)}: {check.detail}")
    except Exception:
        if inspection is not None:
            inspection.record_after_failure(recorder, on_phase)
        raise
    waited_for_inspection = 0.0
    if inspection is not None:  # before any timed launch (BackgroundInspection)
        on_phase("inspect")
        waiting = time.perf_counter()
        inspection.record(recorder)
        waited_for_inspection = time.perf_counter() - waiting  # the runner's, not the kernel's

    if cfg.check.get("sanitizer"):  # under a correctness tool: verified, nothing timed
        return RunOutcome(plan, device, resources, check, None, None, None, metrics)
    enqueue, buffers = prepared.enqueue, prepared.buffers
    on_phase("time")
    gpu = nvml_handle(device.uuid, device.pci_address) if device.is_nvidia_gpu else None
    before_each = None
    if prepared.initial or cfg.timing.flush_l2:
        def before_each():
            prepared.restore(backend)  # every sample starts from C0 (beta != 0)
            if cfg.timing.flush_l2:
                backend.flush_cache()  # after the restore, so the sample still starts cold

    # The host's CPUs where they run the kernel (a GPU's timing does not share them, and the
    # host monitor's minimum span would lengthen the GPU monitor's window).
    on_cpu = device.device_type == "cpu"

    def timed() -> tuple[Samples, GpuState]:
        nonlocal host_state
        with Monitor(gpu) as state, (HostMonitor() if on_cpu else nullcontext()) as host:
            taken = measure(lambda: backend.time_ms(enqueue), Warmup.of(cfg.timing),
                            Repetitions.of(cfg.timing), f"{plan.name} on {backend.name}",
                            before_each)
        host_state = host
        return taken, state

    host_state: Optional[HostState] = None
    samples, gpu_state = timed()
    if cfg.timing.get("require_clean") and gpu_state.hygiene != "clean":
        log.warning("%s: measured on a %s GPU (%s); measuring again in %g s", plan.name,
                    gpu_state.hygiene, gpu_state.why(), CLEAN_RETRY_PAUSE_S)
        time.sleep(CLEAN_RETRY_PAUSE_S)
        samples, gpu_state = timed()
        if gpu_state.hygiene != "clean":
            raise RunError(f"{plan.name} was measured on a {gpu_state.hygiene} GPU twice "
                           f"({gpu_state.why()}); timing.require_clean=true records no such "
                           "number")
    stats = TimeStats.of(samples)
    seconds = stats.median * 1e-3
    metrics.update({
        names.TIME_MS_MEDIAN: stats.median, names.TIME_MS_MEAN: stats.mean,
        names.TIME_MS_MIN: stats.min,
        names.TIME_MS_MAX: stats.max, names.TIME_MS_Q1: stats.q1, names.TIME_MS_Q3: stats.q3,
        names.TIME_NOISE: finite(stats.noise), names.TIME_SAMPLES: float(stats.repeats),
        names.TIME_WARMUP_LAUNCHES: float(samples.warmup_launches),
        names.GFLOPS: plan.flops / seconds / 1e9 if plan.flops else None,
        names.GBPS: plan.min_bytes / seconds / 1e9,
    })
    recorder.metrics(metrics)
    recorder.text(samples_text(samples), names.SAMPLES_ARTIFACT)
    record_gpu_state(recorder, metrics, gpu_state, plan,
                     launches=samples.warmup_launches + len(samples))
    if host_state is not None:
        metrics.update(host_state.metrics())
        recorder.metrics(metrics)
        recorder.tags(host_state.tags())
    judge_against_ceiling(recorder, metrics, plan, device, gpu, cfg.timing.flush_l2)
    on_phase("recheck")
    metrics[names.TIME_MS_CHECKED] = check_timed_launches(
        backend, prepared, problem, check_cfg, cfg.seed, samples,
        backend.flush_cache if cfg.timing.flush_l2 else None)
    energy_s = float(cfg.timing.get("energy_s", 0.0) or 0.0)
    energy = energy_probe(gpu, energy_s)
    if energy_s and energy is None:
        recorder.tags({names.ENERGY_UNKNOWN: f"timing.energy_s needs an NVIDIA GPU's energy "
                                             f"counter (NVML): none for {device.name}"})
    if energy is not None:
        on_phase("energy")
        with timed_window():
            spent = energy(lambda count: backend.time_ms(lambda: repeated(enqueue, count)),
                           stats.median)
        record_energy(recorder, metrics, plan, names.ENERGY_PREFIX, spent)
    metrics[names.KERNEL_WORK_S] = time.perf_counter() - started - waited_for_inspection
    recorder.metrics(metrics)

    on_phase("vendor")
    with Monitor(gpu) as vendor_gpu:
        vendor = vendor_baseline(backend, plan, problem, buffers, cfg.timing, check_cfg,
                                 cfg.seed, energy)
    vendor_stats = record_vendor(recorder, metrics, plan, vendor, vendor_gpu, stats,
                                 energy is not None)
    return RunOutcome(plan, device, resources, check, stats, vendor, vendor_stats, metrics,
                      gpu_state if gpu is not None else None, host_state)


