"""The composed config's numbers against their ranges: one table, checked before anything runs.

The schema (runner/config/schema.py) already refuses a value of the wrong type at composition (Hydra's
message). What it cannot say is that a value of the right type makes no sense: no timed
repetitions, a tolerance of zero, a negative seed. Each key here has its range and the reason
for it; a value outside refuses the run (recorded as FAILED, status `refused`) with one line
naming the key, the value and what is allowed.
"""

import math
from typing import NamedTuple, Optional

from omegaconf import OmegaConf

from runner.config.paths import check_source_name
from runner.errors import Refused

INT32_MAX = 2**31 - 1


class Range(NamedTuple):
    low: float
    high: float
    why: str
    low_open: bool = False  # the low end itself is not allowed (a tolerance of 0)


RANGES = {
    "timing.warmup": Range(0, 100_000, "untimed launches; more than 100000 only keeps the "
                                       "device busy"),
    # A median of one or two samples is one sample or the mean of two: one slow launch (a clock
    # ramping up, a context switch) is then the result. Three is the fewest whose median sets
    # one outlier aside.
    "timing.repeats": Range(3, 100_000, "the median of fewer than 3 timed launches is not robust "
                                        "to a single outlier; more than 100000 only keeps the "
                                        "device busy"),
    "timing.warmup_min_s": Range(0.0, 3_600.0, "seconds of warm-up launches at least"),
    "timing.warmup_max_s": Range(0.0, 3_600.0, "seconds after which warm-up stops, steady "
                                                "or not"),
    "timing.target_noise": Range(0.0, 1.0, "the relative half-width of the median's 95% "
                                           "interval at which the adaptive mode stops (null: "
                                           "off)", low_open=True),
    "timing.min_time_s": Range(0.0, 86_400.0, "seconds of timed samples the adaptive mode "
                                              "takes at least"),
    "timing.max_time_s": Range(0.0, 86_400.0, "seconds after which the adaptive mode stops",
                               low_open=True),
    "timing.energy_s": Range(0.0, 600.0, "seconds of launches back to back for the work per "
                                         "joule (0: off)"),
    "check.tolerance": Range(0.0, 0.1, "a relative error; 0 refuses every float result, above "
                                       "0.1 a wrong kernel passes", low_open=True),
    "check.full_reference_max_macs": Range(1, 2**40, "multiply-adds of the float64 reference "
                                                     "computed on the host"),
    "check.sanitizer_timeout_s": Range(0.0, 86_400.0, "seconds the checked launch may take "
                                                       "under check.sanitizer", low_open=True),
    "check.sample_rows": Range(1, INT32_MAX, "rows of C checked against the reference"),
    "check.sample_cols": Range(1, INT32_MAX, "columns of C checked against the reference"),
    "seed": Range(0, 2**32 - 1, "the inputs' seed, recorded with the run: a 32-bit unsigned "
                                "value any generator can take"),
    "m": Range(1, INT32_MAX, "the kernels index with 32-bit ints"),
    "n": Range(1, INT32_MAX, "the kernels index with 32-bit ints"),
    "k": Range(1, INT32_MAX, "the kernels index with 32-bit ints"),
    "gpus": Range(0, 1024, "GPUs a sweep's jobs share (0: no pool)"),
}


OPTIONAL = {"timing.target_noise"}  # null: off


def _allowed(rule: Range) -> str:
    low = "(" if rule.low_open else "["
    return f"{low}{rule.low:g}, {rule.high:g}]" if isinstance(rule.low, float) \
        else f"{rule.low}..{rule.high}"


def check_value(key: str, value, rule: Range) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Refused(f"{key}={value!r} is not a number (allowed: {_allowed(rule)}: {rule.why})")
    inside = math.isfinite(value) and rule.low <= value <= rule.high
    if rule.low_open and value == rule.low:
        inside = False
    if not inside:
        raise Refused(f"{key}={value} is out of range (allowed: {_allowed(rule)}: {rule.why})")


def validate(cfg) -> None:
    """Refuse a config whose values make no sense, before anything is compiled or timed."""
    operation = getattr(cfg.kernel.operation, "value", cfg.kernel.operation)
    for key, rule in RANGES.items():
        if key == "k" and operation != "sgemm":
            continue  # copies and transposes are M x N
        shown = key
        if key in ("m", "n", "k") and OmegaConf.is_interpolation(cfg, key):
            shown = "size"  # m, n and k follow `size` unless given
        value: Optional[object] = OmegaConf.select(cfg, key)
        if value is None and key in OPTIONAL:
            continue
        check_value(shown, value, rule)
    timing = cfg.timing
    if timing.get("target_noise") is not None and timing.min_time_s > timing.max_time_s:
        raise Refused(f"timing.min_time_s={timing.min_time_s} is above timing.max_time_s="
                      f"{timing.max_time_s}: the adaptive mode could never take its minimum")
    energy_s = timing.get("energy_s", 0.0) or 0.0
    if 0 < energy_s < 1.0:
        raise Refused(f"timing.energy_s={energy_s}: a span under 1 s tells no energy (NVML's "
                      "counter moves in steps of tens of milliseconds); 0 turns it off")
    if energy_s >= timing.timeout_s:
        raise Refused(f"timing.energy_s={energy_s} is not under timing.timeout_s="
                      f"{timing.timeout_s}: the span would be taken for a hung kernel")
    own_tolerance = OmegaConf.select(cfg, "kernel.tolerance")
    if own_tolerance is not None:  # a reduced-precision step's own, in place of check.tolerance
        check_value("kernel.tolerance", own_tolerance, RANGES["check.tolerance"])
    for backend in ("opencl", "cuda"):  # names from a user's YAML pick a file inside the folders
        name = OmegaConf.select(cfg, f"kernel.sources.{backend}")
        if name is not None:
            check_source_name(name)
