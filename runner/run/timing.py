"""Warm-up, repetitions and their statistics. Each sample comes from device events.

Two ways to choose how many timed samples a run takes (`timing.*`, runner/config/schema.py):

- fixed (the default): `timing.repeats` samples;
- adaptive (`timing.target_noise`, e.g. 0.005): sample until the median is known to within that
  fraction, by `median_noise`, having taken at least MIN_SAMPLES samples over at least
  `timing.min_time_s`, or until `timing.max_time_s` has passed, whichever comes first.

`median_noise` is the half-width of the distribution-free 95% confidence interval of the median,
relative to the median: the interval between two order statistics whose ranks come from the
binomial distribution of how many samples fall below the true median (Conover, Practical
Nonparametric Statistics, 3rd ed., §3.2). It assumes nothing about the samples' shape (GPU
times are skewed, often bimodal, and quantised by the timer), a few outliers move its ends by
a rank each and no further (as they move the median), and it is deterministic and costs one
sort: cheap enough to check while sampling, unlike a bootstrap of thousands of resamples.
MAD/sqrt(n) needs a factor that holds only for normal samples.

Warm-up (`Warmup`, read from the config in runner/config/measurement.py): at least
`timing.warmup` untimed launches, for at least `timing.warmup_min_s` seconds, and until the rate
is steady: the median of the last STEADY_WINDOW warm-up samples within STEADY_TOLERANCE of the
median of the STEADY_WINDOW before them; or until `timing.warmup_max_s`, steady or not. A count
alone was not enough: on a freshly started H100 the first sweep's cuBLAS at 1024 ran at half its
rate for a whole run of 5 + 20 launches (the clocks had not come up), and that baseline was
reused by four jobs.
"""

import math
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Optional, Union

import numpy as np

from runner.config.measurement import Repetitions, Warmup
from runner.terminal import progress as progress_bars

# The runner's own background host work (the coming jobs' inputs drawn in a thread of the
# worker: runner/run/ahead.py) waits while launches are timed. Each launch is enqueued from
# Python; a thread holding the interpreter lock, or BLAS on every core, can hold a launch back
# past the spin kernel before it, and the GPU then idles inside the timed span (a host held
# back under a profiler timed a 62 µs kernel at up to 5 ms; docs/methodology.md).
_quiet = threading.Event()
_quiet.set()
_windows_lock = threading.Lock()
_windows = 0


@contextmanager
def timed_window():
    """Timed launches happen inside: background work of the runner's own pauses meanwhile."""
    global _windows
    with _windows_lock:
        _windows += 1
        _quiet.clear()
    try:
        yield
    finally:
        with _windows_lock:
            _windows -= 1
            if not _windows:
                _quiet.set()


def outside_timed_windows() -> None:
    """Background host work calls this between its steps: it returns once no launch is timed
    (at once when none is). Never called inside a timed window's own thread."""
    _quiet.wait()


# The fewest samples the adaptive mode takes: the first count whose 95% interval of the median
# is narrower than the samples' whole range ([x(2), x(9)] of 10, 97.9% coverage).
MIN_SAMPLES = 10
_Z95 = 1.959963984540054  # the standard normal's 97.5% quantile: a two-sided 95% interval
STEADY_WINDOW = 3  # warm-up samples in each of the two windows whose medians must agree
STEADY_TOLERANCE = 0.05  # how far apart those medians may be for the rate to count as steady


def median_interval_ranks(count: int) -> tuple[int, int]:
    """The 1-based ranks (low, high) of the order statistics bounding a 95% confidence interval
    of the median of `count` samples (the normal approximation of the binomial, rounded to the
    nearest rank; it matches the exact binomial ranks at 10 and 20 samples)."""
    half_width = _Z95 * math.sqrt(count) / 2
    low = int(round(count / 2 - half_width))
    high = int(round(1 + count / 2 + half_width))
    return max(1, low), min(count, high)


def median_noise(samples_ms) -> float:
    """The relative half-width of the 95% confidence interval of the median (0.005: the median
    is known to within ±0.5%); inf for no samples or a median that is not positive."""
    values = np.sort(np.asarray(samples_ms, dtype=np.float64))
    if values.size == 0:
        return math.inf
    median = float(np.median(values))
    if not median > 0:
        return math.inf
    low, high = median_interval_ranks(values.size)
    return float(values[high - 1] - values[low - 1]) / (2 * median)


@dataclass(frozen=True)
class TimeStats:
    median: float
    mean: float
    min: float
    max: float
    q1: float
    q3: float
    repeats: int  # the number of timed samples
    noise: float = math.inf  # median_noise of the samples

    @classmethod
    def of(cls, samples_ms: list[float]) -> "TimeStats":
        values = np.asarray(samples_ms, dtype=np.float64)
        q1, median, q3 = np.percentile(values, [25, 50, 75])
        return cls(float(median), float(values.mean()), float(values.min()), float(values.max()),
                   float(q1), float(q3), len(values), median_noise(values))


def steady(samples_ms: list[float]) -> bool:
    """The last STEADY_WINDOW samples' median within STEADY_TOLERANCE of the median of the
    STEADY_WINDOW before them (medians: one launch preempted by the host does not count)."""
    if len(samples_ms) < 2 * STEADY_WINDOW:
        return False
    last = float(np.median(samples_ms[-STEADY_WINDOW:]))
    before = float(np.median(samples_ms[-2 * STEADY_WINDOW:-STEADY_WINDOW]))
    return before > 0 and abs(last / before - 1) <= STEADY_TOLERANCE


class Samples(list):
    """Timed samples (milliseconds), and how many warm-up launches came before them."""
    warmup_launches: int = 0
    warmup_steady: bool = True  # False: warm-up ran out of time (warmup_max_s) unsteady


def _warm_up(time_once_ms, warmup: Warmup, before_each, clock, advance) -> tuple[int, bool]:
    """The warm-up launches; returns how many there were and whether the rate became steady."""
    started = clock()
    taken: list[float] = []
    # No launches asked for: none at all (a cold first sample is what such a user measures).
    timed_rule = warmup.launches > 0 and (warmup.min_s > 0 or warmup.max_s > 0)
    while True:
        if len(taken) >= max(0, warmup.launches) and not timed_rule:
            return len(taken), True
        elapsed = clock() - started
        if len(taken) >= max(0, warmup.launches) and timed_rule:
            if elapsed >= warmup.min_s and steady(taken):
                return len(taken), True
            if elapsed >= max(warmup.max_s, warmup.min_s):
                return len(taken), False
        if before_each is not None:
            before_each()
        taken.append(time_once_ms())
        advance()


def measure(time_once_ms: Callable[[], float], warmup: Union[int, Warmup],
            repeats: Union[int, Repetitions], label: str,
            before_each: Optional[Callable[[], None]] = None,
            clock: Callable[[], float] = time.perf_counter) -> Samples:
    """Warm up (a count, or a Warmup), then return the timed samples (milliseconds): `repeats`
    of them, or as many as a Repetitions with a target noise asks for (see the module's doc).
    `before_each` (e.g. an L2 flush) runs before every sample, outside its timed span.
    `clock` (seconds) measures the time limits; tests give a fake one."""
    rule = repeats if isinstance(repeats, Repetitions) else Repetitions(repeats)
    warm = warmup if isinstance(warmup, Warmup) else Warmup(int(warmup))
    with timed_window():
        if not rule.adaptive:
            return _fixed(time_once_ms, warm, rule.repeats, label, before_each, clock)
        return _adaptive(time_once_ms, warm, rule, label, before_each, clock)


def _fixed(time_once_ms, warmup: Warmup, repeats: int, label: str, before_each,
           clock=time.perf_counter) -> Samples:
    if repeats < 1:
        raise ValueError("timing.repeats must be >= 1")
    samples = Samples()
    with progress_bars.task(label, max(0, warmup.launches) + repeats) as (progress, task):
        samples.warmup_launches, samples.warmup_steady = _warm_up(
            time_once_ms, warmup, before_each, clock, lambda: progress.advance(task))
        _set_total(progress, task, samples.warmup_launches + repeats)
        for _ in range(repeats):
            if before_each is not None:
                before_each()
            samples.append(time_once_ms())
            progress.advance(task)
    return samples


def _adaptive(time_once_ms, warmup: Warmup, rule: Repetitions, label: str, before_each,
              clock) -> Samples:
    """The adaptive loop. The stability check sorts the samples, so it runs at every sample
    up to 100 and then each time their count has grown by 5%: a sort per sample would make a
    run of a fast kernel's 100,000 samples quadratic. The bar's total is an estimate, updated
    at each check: the count the noise reached predicts (the interval narrows as 1/sqrt(n)),
    capped by the count max_time_s allows at the rate so far."""
    target = float(rule.target_noise)
    if not target > 0:
        raise ValueError("timing.target_noise must be > 0")
    samples = Samples()
    with progress_bars.task(f"{label} (to ±{target:.2%})",
                            max(0, warmup.launches) + MIN_SAMPLES) as (bar, task):
        samples.warmup_launches, samples.warmup_steady = _warm_up(
            time_once_ms, warmup, before_each, clock, lambda: bar.advance(task))
        warmup = samples.warmup_launches
        started = clock()
        next_check = MIN_SAMPLES
        while True:
            if before_each is not None:
                before_each()
            samples.append(time_once_ms())
            bar.advance(task)
            elapsed = clock() - started
            count = len(samples)
            if elapsed >= rule.max_time_s:
                break
            if count < next_check or elapsed < rule.min_time_s:
                continue
            noise = median_noise(samples)
            if noise <= target:
                break
            next_check = count + max(1, count // 20) if count >= 100 else count + 1
            by_noise = count * (noise / target) ** 2
            by_time = count * rule.max_time_s / elapsed if elapsed > 0 else by_noise
            _set_total(bar, task, warmup + max(next_check, int(min(by_noise, by_time))))
    return samples


def _set_total(bar, task, total: int) -> None:
    update = getattr(bar, "update", None)
    if update is not None:
        update(task, total=total)
