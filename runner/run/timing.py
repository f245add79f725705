"""Warm-up, repetitions and their statistics. Each sample comes from device events."""

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from runner.terminal import progress as progress_bars


@dataclass(frozen=True)
class TimeStats:
    median: float
    mean: float
    min: float
    max: float
    q1: float
    q3: float
    repeats: int

    @classmethod
    def of(cls, samples_ms: list[float]) -> "TimeStats":
        values = np.asarray(samples_ms, dtype=np.float64)
        q1, median, q3 = np.percentile(values, [25, 50, 75])
        return cls(float(median), float(values.mean()), float(values.min()), float(values.max()),
                   float(q1), float(q3), len(values))


def measure(time_once_ms: Callable[[], float], warmup: int, repeats: int,
            label: str, before_each: Optional[Callable[[], None]] = None) -> list[float]:
    """Run `warmup` untimed samples, then return `repeats` timed ones (milliseconds).
    `before_each` (e.g. an L2 flush) runs before every sample, outside its timed span."""
    if repeats < 1:
        raise ValueError("timing.repeats must be >= 1")
    samples = []
    with progress_bars.task(label, warmup + repeats) as (progress, task):
        for index in range(max(0, warmup) + repeats):
            if before_each is not None:
                before_each()
            sample = time_once_ms()
            if index >= warmup:
                samples.append(sample)
            progress.advance(task)
    return samples
