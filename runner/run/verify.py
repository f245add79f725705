"""The check stage: one launch of the step (every launch, in order) into poisoned output and
scratch, its guard zones and inputs checked, its result against the reference
(`checked_launch`); and after the timed launches one more, checked the same way and timed
against them, so that a kernel whose timed launches skipped work is caught
(`check_timed_launches`)."""

import dataclasses
from typing import Callable, Optional

import numpy as np

from runner.backends.base import Backend
from runner.errors import VerificationError
from runner.run.guards import violation
from runner.run.kernel_program import PreparedRun
from runner.run.operations import CheckResult, Problem, check_result
from runner.run.timing import timed_window

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
