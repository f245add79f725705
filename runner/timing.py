"""Warm-up, repetitions and their statistics. Each sample comes from device events."""

from dataclasses import dataclass
from typing import Callable

import numpy as np
from runner import progress as progress_bars


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
            label: str) -> list[float]:
    """Run `warmup` untimed samples, then return `repeats` timed ones (milliseconds)."""
    if repeats < 1:
        raise ValueError("timing.repeats must be >= 1")
    samples = []
    with progress_bars.task(label, warmup + repeats) as (progress, task):
        for _ in range(max(0, warmup)):
            time_once_ms()
            progress.advance(task)
        for _ in range(repeats):
            samples.append(time_once_ms())
            progress.advance(task)
    return samples
