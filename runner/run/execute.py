"""One run: compile with defines, check limits, verify one launch, time, run the vendor baseline.

Backend-agnostic and kernel-agnostic: everything kernel-specific comes from the plan.
Everything learnt along the way goes to the recorder at once, so a run that fails halfway is
still recorded with what it had.
"""

import dataclasses
import logging
import threading
from concurrent.futures import Future, TimeoutError as FutureTimeout
from contextlib import nullcontext
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from runner.backends.base import Backend, CompiledProgram, DeviceInfo, KernelResources
from runner.backends.includes import local_includes
from runner.config.paths import kernel_source_path, kernel_source_text
from runner.config.spec import (
    OPERATION_BUFFERS,
    KernelPlan,
    ScalarArg,
    TensorMapArg,
    entry_label,
)
from runner.errors import ImpossibleResult, Refused, RunError, VerificationError
from runner.record import names
from runner.run.gpu_state import EnergySpan, GpuState, Monitor, energy_probe, nvml_handle
from runner.run.host_state import HostMonitor, HostState
from runner.run.guards import (
    GUARD_UNIT_FLOATS,
    compared_on_device,
    guarded_alloc,
    guarded_upload,
    violation,
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
    check_result,
    clear_caches,
    effective_check,
    make_problem,
    operation_floats,
)
from runner.run.peak import ceiling, impossible_reason, nvml_limits
from runner.run.timing import (
    Repetitions,
    Samples,
    TimeStats,
    Warmup,
    measure,
    timed_window,
)
from runner.run.vendor import VendorResult, vendor_baseline

log = logging.getLogger(__name__)
CLEAN_RETRY_PAUSE_S = 10.0  # timing.require_clean: how long a busy GPU gets to settle
# A checked launch after the timed ones that takes this many times the slowest timed sample
# did work the timed launches skipped. Against the slowest, not the median: a launch the host
# delayed is already among the samples.
SKIPPED_WORK_RATIO = 3.0
# ... and by at least this much: a launch of a few microseconds into freshly poisoned buffers (a
# CPU's caches cold after the fill) measured 7x its warm samples at 16^3 on PoCL, 0.013 ms.
SKIPPED_WORK_FLOOR_MS = 0.1
# A single launch can be held up on its own (an H100 timed a correct 46 µs kernel's launch into
# poisoned output at 374 and 254 µs, twice running, at a sweep's end): the launch is tried this
# many times, each try after the first paired with a plain launch timed just before it, as the
# samples were. Work skipped makes every try slow against its pair; a held-up GPU slows both.
SKIPPED_WORK_TRIES = 3
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


def source_with_defines(source: str, options: list[str], defines: dict[str, int]) -> str:
    """The exact source as compiled: the -D defines written out, so the file compiles alone."""
    header = ["// compiled by gemmlab with: " + " ".join(options)]
    header += [f"#define {name} {value}" for name, value in defines.items()]
    return "\n".join(header) + "\n" + source


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


@dataclass
class PreparedRun:
    """A compiled kernel with its buffers bound: `enqueue()` puts every launch on the queue."""
    file_name: str
    source_artifact: str  # the exact source with its defines
    program: CompiledProgram
    buffers: dict
    enqueue: Callable[[], list]
    source: str = ""  # as read, before the defines
    guarded: dict = field(default_factory=dict)  # name -> GuardedBuffer around `buffers[name]`
    kernel_name: str = ""
    size_label: str = ""
    # name -> (pristine device copy, bytes): an output whose initial contents the kernel reads
    # (sgemm with beta != 0), copied back in before the checked launch and every timed sample.
    initial: dict = field(default_factory=dict)
    blas: tuple = (1.0, 0.0)  # sgemm's (alpha, beta), for the check
    include_dirs: tuple = ()  # the source's folder: the files beside it that it includes
    headers: dict = field(default_factory=dict)  # those files: name -> text (recorded)

    def restore(self, backend: Backend) -> None:
        """Copy each such output's initial contents back in (outside any timed span)."""
        for name, (pristine, nbytes) in self.initial.items():
            backend.device_copy(self.buffers[name], pristine, nbytes)
        if self.initial:
            backend.synchronize()


# Per backend object, never per id(): a backend that is gone can leave its id to a new one on
# another device, which must not be handed the old one's programs.
_programs: "weakref.WeakKeyDictionary[Backend, dict[tuple, CompiledProgram]]" = \
    weakref.WeakKeyDictionary()
_inspections: "weakref.WeakKeyDictionary[Backend, dict[tuple, dict[str, str]]]" = \
    weakref.WeakKeyDictionary()


def _program_key(source: str, file_name: str, entries: list[str],
                 defines: dict[str, int], max_registers, include_dirs: Sequence[str] = ()
                 ) -> tuple:
    folder = Path(include_dirs[0]) if include_dirs else None
    headers = tuple((str(path), path.read_bytes()) for path in local_includes(source, folder)) \
        if folder is not None else ()  # an edited header beside the source: another program
    return (source, file_name, tuple(entries), tuple(sorted(defines.items())),
            max_registers, tuple(include_dirs), headers)


def compile_once(backend: Backend, source: str, file_name: str, entries: list[str],
                 defines: dict[str, int], max_registers,
                 include_dirs: Sequence[str] = ()) -> CompiledProgram:
    """Compile a source with its defines once per backend and process (a sweep's jobs that
    differ only in size, or a re-run, reuse the program, its log and its resource report).
    `include_dirs`: the source's own folder, for the files beside it that it includes."""
    key = _program_key(source, file_name, entries, defines, max_registers, include_dirs)
    programs = _programs.setdefault(backend, {})
    if key not in programs:
        programs[key] = backend.compile(source, file_name, entries, defines, max_registers,
                                        include_dirs=tuple(include_dirs))
    return programs[key]


def inspect_once(backend: Backend, prepared: "PreparedRun", plan: KernelPlan) -> dict[str, str]:
    """The inspection files of a compiled program (runner/inspect/program.py: summary.md, PTX, SASS
    or the build log), made once per program like the program itself. Never fails a run: what
    could not be made is said in summary.md."""
    key = _program_key(prepared.source, prepared.file_name, plan.entries, plan.defines,
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


def check_overlap_waits(plan: KernelPlan, backend_name: str, file_name: str, source: str):
    """A CUDA launch that overlaps the one before it reads that one's results only after
    `griddepcontrol.wait`; a source without one would race its pre-pass, so it is refused."""
    overlapping = [launch.entry for launch in plan.launches if launch.overlap_previous]
    if backend_name == "cuda" and overlapping and "griddepcontrol.wait" not in source:
        raise RunError(f"{plan.name}: {overlapping[0]} overlaps the launch before it "
                       f"(overlap_previous), but {file_name} never runs griddepcontrol.wait, so "
                       "it could read that launch's results before they are written")


def bind_tensor_map(backend: Backend, plan: KernelPlan, arg: TensorMapArg, guarded: dict):
    """A tensor map over the buffer the kernel gets (the view between the guards, 64 KiB into
    its allocation, so 16-byte aligned as TMA asks), after checking that every element it can
    reach is inside that buffer: TMA reads nothing outside rows x cols."""
    buffer = guarded[arg.buffer]
    if arg.floats > buffer.count:
        raise RunError(f"{plan.name}: {arg} reaches {arg.floats} floats of {arg.buffer}, which "
                       f"has {buffer.count}")
    return backend.tensor_map(buffer.inner, arg.rows, arg.cols, arg.ld, arg.box_rows,
                              arg.box_cols, arg.swizzle)


def scalar_value(arg: ScalarArg):
    """A scalar as the kernel takes it: np.float32 (a Python float would go as a double to
    CUDA), or an int, which both backends pass as a 32-bit int."""
    return np.float32(arg.value) if arg.kind == "float" else int(arg.value)


def _arg_kind(arg, plan: KernelPlan) -> str:
    if isinstance(arg, ScalarArg):
        return arg.kind
    if isinstance(arg, TensorMapArg):
        return "tensor_map"
    return "int" if arg in plan.size.as_names() else "pointer"


def check_signatures(plan: KernelPlan, program: CompiledProgram, file_name: str,
                     backend_name: str) -> None:
    """Each launch's arguments against its function's parameters, where the backend can tell
    them (CompiledProgram.signatures): their number, and int / float / pointer for each. A
    trailing OpenCL `__local` parameter is the launch's `local_bytes`."""
    for launch in plan.launches:
        declared = program.signatures.get(launch.entry)
        if declared is None:
            continue  # this driver cannot tell: unchecked
        declared = list(declared)
        if launch.local_bytes and declared and declared[-1] == "local":
            declared.pop()
        given = [_arg_kind(arg, plan) for arg in launch.args]
        shown = ", ".join(str(arg) for arg in launch.args)
        if len(given) != len(declared):
            raise RunError(f"{plan.name}: launch {launch.entry} passes {len(given)} arguments "
                           f"({shown}) but {file_name} declares {len(declared)} "
                           f"({', '.join(declared)}) on {backend_name}")
        for index, (arg, want, have) in enumerate(zip(launch.args, given, declared)):
            if want != have and not have.startswith("other"):
                raise RunError(f"{plan.name}: launch {launch.entry}: argument {index + 1} "
                               f"({arg}) is {'an' if want == 'int' else 'a'} {want}, but "
                               f"parameter {index + 1} of {file_name}'s {launch.entry} is "
                               f"{'an' if have == 'int' else 'a'} {have}")


def checked_launch(backend: Backend, prepared: PreparedRun, problem: Problem, check_cfg,
                   seed: int, before: Optional[Callable[[], None]] = None) -> CheckResult:
    """One launch (every launch of the step, in order) into poisoned output and scratch, timed
    and checked against the reference, after its guard zones and inputs are checked (a
    VerificationError when it wrote where it must not). `before` (an L2 flush) runs last before
    the launch, as before a timed sample."""
    for name, buffer in prepared.buffers.items():
        if name not in problem.inputs and name not in prepared.initial:
            backend.poison(buffer)
    prepared.restore(backend)  # C0 into C, where the kernel reads C (beta != 0)
    if before is not None:
        before()
    with timed_window():
        launch_ms = backend.time_ms(prepared.enqueue)
    output = prepared.guarded.get(problem.output_name)
    downloaded = _Downloaded(backend, output)
    for name, guarded in prepared.guarded.items():
        wrong = (violation(downloaded, name, guarded, whole=True) if guarded is output
                 else violation(backend, name, guarded))
        if wrong:
            raise VerificationError(f"{prepared.kernel_name} {wrong} at {prepared.size_label}")
    result = downloaded.inner(problem.output_shape)
    if result is None:
        result = backend.download(prepared.buffers[problem.output_name], problem.output_shape)
    checked = check_result(problem.operation, problem, result, check_cfg, seed, *prepared.blas)
    return dataclasses.replace(checked, launch_ms=launch_ms)


class _Downloaded:
    """The output's whole allocation (guards and buffer) downloaded once for its guard check
    (`violation` reads it through this, as it would through the backend), and the buffer
    between the guards then taken from that copy as a view: one device-to-host copy of the
    output per checked launch instead of two, the same bits."""

    def __init__(self, backend: Backend, output):
        self.backend, self.output, self.whole = backend, output, None

    def download(self, buffer, shape: tuple[int, ...]) -> np.ndarray:
        host = self.backend.download(buffer, shape)
        if self.output is not None and buffer is self.output.whole:
            self.whole = host
        return host

    def inner(self, shape: tuple[int, ...]) -> Optional[np.ndarray]:
        """The output as `backend.download(inner, shape)` gives it, or None if not downloaded."""
        output, whole = self.output, self.whole
        count = int(np.prod(shape))
        if whole is None or whole.size != 2 * output.guard + output.count or count > output.count:
            return None
        return whole.reshape(-1)[output.guard:output.guard + count].view(np.float32).reshape(shape)


def check_timed_launches(backend: Backend, prepared: PreparedRun, problem: Problem, check_cfg,
                         seed: int, samples: list[float],
                         before: Optional[Callable[[], None]] = None) -> float:
    """The timed launches are the checked launches: one more launch after them, into freshly
    poisoned output and scratch, checked like the first; a wrong result means the kernel's
    later launches differ from its first (it keeps state between launches). Its time is set
    against the timed samples: far slower, in each of SKIPPED_WORK_TRIES tries (the later ones
    against a plain launch timed beside them), and the timed launches skipped work it did (a
    kernel that returns early when its output already holds a result). Returns its time."""
    label = f"{prepared.kernel_name} at {prepared.size_label}"

    def poisoned() -> float:
        checked = checked_launch(backend, prepared, problem, check_cfg, seed, before)
        if not checked.passed:
            raise VerificationError(
                f"{label}: a launch after the timed ones gave a wrong result ({checked.detail}), "
                "though its first launch was right: the kernel does not do the same work on "
                "every launch, so its timed launches cannot be trusted")
        return checked.launch_ms

    def plain() -> float:  # as a timed sample: into the output as the last launch left it
        prepared.restore(backend)
        if before is not None:
            before()
        with timed_window():
            return backend.time_ms(prepared.enqueue)

    def too_slow(ms: float, against: float) -> bool:
        return ms > SKIPPED_WORK_RATIO * against and ms - against > SKIPPED_WORK_FLOOR_MS

    tries = [(poisoned(), max(samples))]
    while too_slow(*tries[-1]) and len(tries) < SKIPPED_WORK_TRIES:
        beside = max(max(samples), plain())
        tries.append((poisoned(), beside))
    if all(too_slow(ms, against) for ms, against in tries):
        shown = ", ".join(f"{ms:.4g}" for ms, _ in tries)
        paired = ", ".join(f"{against:.4g}" for _, against in tries[1:])
        raise VerificationError(
            f"{label}: its timed launches took {float(np.median(samples)):.4g} ms (at most "
            f"{max(samples):.4g}), launches into poisoned output {shown} ms, each over "
            f"{SKIPPED_WORK_RATIO:g}x longer (the later ones against plain launches timed "
            f"beside them: {paired} ms): the timed launches skipped work (does it return early "
            "when its output already holds a result?)")
    return min(ms for ms, _ in tries)


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


def _finite(value: float) -> Optional[float]:
    return value if value == value and abs(value) != float("inf") else None


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
        names.TIME_NOISE: _finite(stats.noise), names.TIME_SAMPLES: float(stats.repeats),
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
            if name != "noisy":
                recorder.tags({f"vendor.{name}": value})
        if "noisy" in vendor.notes:  # measured, recorded, but no number is set against it
            recorder.tags({names.VENDOR_UNUSABLE: vendor.notes["noisy"]})
        vendor_stats = TimeStats.of(vendor.samples_ms)
        vendor_seconds = vendor_stats.median * 1e-3
        metrics.update({
            names.VENDOR_TIME_MS_MEDIAN: vendor_stats.median,
            names.VENDOR_GFLOPS: plan.flops / vendor_seconds / 1e9 if plan.flops else None,
            names.VENDOR_GBPS: plan.min_bytes / vendor_seconds / 1e9,
            names.VENDOR_REL_ERROR: vendor.rel_error,
            names.VENDOR_TIME_NOISE: _finite(vendor_stats.noise),
            names.VENDOR_TIME_SAMPLES: float(vendor_stats.repeats),
            names.PCT_OF_VENDOR: None if "noisy" in vendor.notes else
            100.0 * vendor_stats.median / stats.median,
        })
        if vendor.rel_error and metrics.get(names.CHECK_REL_ERROR) is not None:
            metrics[names.CHECK_ERROR_VS_VENDOR] = metrics[names.CHECK_REL_ERROR] / vendor.rel_error
        recorder.tags({names.VENDOR_NAME: vendor.name})
        recorder.text(samples_text(vendor.samples_ms), names.VENDOR_SAMPLES_ARTIFACT)
        if energy is not None:
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
            if energy is not None:
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
                       else _library_name(reference.name)})
        recorder.metrics(metrics)
    return RunOutcome(plan, device, resources, check, stats, vendor, vendor_stats, metrics,
                      gpu_state if gpu is not None else None, host_state)


def _library_name(recorded: str) -> str:
    """A vendor library's name as pages show it (runner/results/records.py, library_name):
    `cuBLAS TF32 (CuPy, …)` -> `cuBLAS TF32`, `cuda device-to-device copy` -> `device copy`."""
    short = recorded.split(" (", 1)[0].strip()
    return "device copy" if short.endswith("device-to-device copy") else short
