"""How a run is asked to measure, read from its config: the tolerance its result is checked with
(`check_tolerance`), its warm-up (`Warmup`) and its timed samples (`Repetitions`), and the noise
a median may have before it is called noisy (`NOISE_LIMIT`). Data and arithmetic only: the run
applies them (runner/run/timing.py, operations.py, vendor.py), the record keys a measurement by
them (runner/record/resume.py) and the results read NOISE_LIMIT back (runner/results/records.py).
"""

from dataclasses import dataclass
from typing import Optional

# A median not known to within this fraction (the half-width of its 95% interval, median_noise)
# is noisy: a baseline is measured again and never used so (runner/run/vendor.py), a kernel's
# record says so wherever its rate is shown (runner/results/records.py, hygiene). 3%: the
# agreement asked of a first and a second sweep on a fresh GPU host.
NOISE_LIMIT = 0.03


def check_tolerance(cfg) -> float:
    """The tolerance a run is checked with: the step's own (`kernel.tolerance`, for a reduced
    precision step such as TF32) or else `check.tolerance`, the FP32 steps' default."""
    own = cfg.kernel.get("tolerance")
    return float(cfg.check.tolerance if own is None else own)


def _getter(timing_cfg):
    """`get(key, default)` over a `timing` config, or over any object with those attributes."""
    if hasattr(timing_cfg, "get"):
        return timing_cfg.get
    return lambda key, default=None: getattr(timing_cfg, key, default)


@dataclass(frozen=True)
class Repetitions:
    """How many timed samples to take: `repeats` of them, or with `target_noise` (a fraction,
    None: off) until the median is that stable, between `min_time_s` and `max_time_s` of
    sampling (host wall-clock seconds from the first timed sample, flushes and launch
    overheads included: the time the run spends)."""
    repeats: int
    target_noise: Optional[float] = None
    min_time_s: float = 0.0
    max_time_s: float = 10.0

    @classmethod
    def of(cls, timing_cfg) -> "Repetitions":
        """The settings of a `timing` config (fixed when it has no target_noise)."""
        get = _getter(timing_cfg)
        return cls(int(timing_cfg.repeats), get("target_noise", None),
                   float(get("min_time_s", 0.0)), float(get("max_time_s", 10.0)))

    @property
    def adaptive(self) -> bool:
        return self.target_noise is not None

    def key(self) -> tuple:
        """What identifies these settings in a cache or a measurement key."""
        if not self.adaptive:
            return (self.repeats,)
        return (self.repeats, self.target_noise, self.min_time_s, self.max_time_s)


@dataclass(frozen=True)
class Warmup:
    """How long to warm up before timing (runner/run/timing.py's doc): at least `launches`
    untimed launches over at least `min_s` seconds, then until the rate is steady or `max_s` has
    passed.
    Warmup(n) is n launches and nothing more; Warmup(0, …) none at all."""
    launches: int
    min_s: float = 0.0
    max_s: float = 0.0

    @classmethod
    def of(cls, timing_cfg) -> "Warmup":
        get = _getter(timing_cfg)
        return cls(int(timing_cfg.warmup), float(get("warmup_min_s", 0.0)),
                   float(get("warmup_max_s", 0.0)))

    def key(self) -> tuple:
        return (self.launches, self.min_s, self.max_s)
