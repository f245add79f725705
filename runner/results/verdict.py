"""Is B faster than A? The verdict on two sets of timed samples, with no store and no device.

    judge(a_ms, b_ms, thresholds, clock_a, clock_b) -> Verdict

The speed of B relative to A is the ratio of the medians, median(A) / median(B) (1.10: B runs
1.1 times as fast, in 1/1.10 of A's time; above 1, B is faster). Its 95% interval is a
percentile bootstrap of that ratio: each side's bootstrap median is drawn directly from the
order statistics of uniforms (Beta distributions, `bootstrap_medians`), which is exactly the
bootstrap distribution of a median and costs the same at 10 samples or 100,000.

The test is Mann-Whitney's U on the raw samples (two-sided; scipy.stats.mannwhitneyu with its
tie correction, exact for small samples without ties), as Google Benchmark's compare.py and
asv do: it compares ranks, so a few launches that took ten times as long move it by a rank
each, never by their size. A significant difference is not always one that matters: on 10,000
samples a 0.1% shift is significant. So, with δ = `min_effect` (default 2%) and α = `alpha`
(default 0.05):

- FASTER / SLOWER: p < α and the ratio is beyond the band [1/(1+δ), 1+δ];
- SAME: the whole 95% interval of the ratio lies inside that band (significant or not: a
  difference smaller than δ is no difference);
- UNCLEAR: neither (the samples are too few or too noisy to say), fewer than `min_samples` on
  a side, no samples, or a difference that vanishes once the SM clock is accounted for: where
  both runs record `gpu/sm_clock_mhz`, B's time is scaled to A's clock (time × clock_B /
  clock_A, as if the kernel were bound by the clock) and a FASTER or SLOWER whose scaled ratio
  falls inside the band, or on the other side of 1, is UNCLEAR (nvbench's clock-aware check:
  the GPU changed, maybe not the kernel).
"""

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

FASTER, SLOWER, SAME, UNCLEAR = "FASTER", "SLOWER", "SAME", "UNCLEAR"
VERDICTS = (FASTER, SLOWER, SAME, UNCLEAR)


@dataclass(frozen=True)
class Thresholds:
    min_effect: float = 0.02  # δ: a speed ratio within [1/(1+δ), 1+δ] is no difference
    alpha: float = 0.05  # the U test's two-sided significance level
    min_samples: int = 5  # fewer on a side: UNCLEAR (U cannot reach p < 0.05 below 4 and 4)
    resamples: int = 10_000  # bootstrap draws of each side's median
    seed: int = 0  # the bootstrap's seed: the same samples give the same interval

    @property
    def band(self) -> tuple[float, float]:
        return 1 / (1 + self.min_effect), 1 + self.min_effect


@dataclass(frozen=True)
class Verdict:
    verdict: str  # FASTER, SLOWER, SAME or UNCLEAR
    speedup: float  # median(A) / median(B): above 1, B is faster
    low: float  # the 95% interval of the speedup (nan without samples)
    high: float
    p_value: float  # Mann-Whitney U, two-sided (nan without samples)
    median_a_ms: float
    median_b_ms: float
    count_a: int
    count_b: int
    clock_speedup: Optional[float] = None  # the speedup with B's time scaled to A's SM clock
    note: str = ""

    @property
    def change(self) -> float:
        """B's time against A's, as a signed fraction: -0.09 is 9% less time (faster)."""
        return 1 / self.speedup - 1


def bootstrap_medians(samples: Sequence[float], resamples: int,
                      rng: np.random.Generator) -> np.ndarray:
    """`resamples` draws of the median of a bootstrap resample (n draws with replacement) of
    `samples`. The k-th smallest of n draws from the samples is the sample at rank
    floor(n·U(k)), U(k) the k-th smallest of n uniforms, which is Beta(k, n-k+1); for an even
    n the next one up is U(k) + (1 - U(k))·Beta(1, n-k)."""
    values = np.sort(np.asarray(samples, dtype=np.float64))
    n = values.size
    middle = (n + 1) // 2
    lower = rng.beta(middle, n - middle + 1, resamples)
    pick = lambda u: values[np.minimum((u * n).astype(np.int64), n - 1)]  # noqa: E731
    if n % 2:
        return pick(lower)
    upper = lower + (1 - lower) * rng.beta(1, n - middle, resamples)
    return (pick(lower) + pick(upper)) / 2


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """The two-sided p-value of Mann-Whitney's U (1.0 where every sample is the same value)."""
    from scipy.stats import mannwhitneyu

    with np.errstate(all="ignore"):
        p = float(mannwhitneyu(a, b, alternative="two-sided").pvalue)
    return 1.0 if math.isnan(p) else p


def judge(a_ms: Sequence[float], b_ms: Sequence[float], thresholds: Thresholds = Thresholds(),
          clock_a: Optional[float] = None, clock_b: Optional[float] = None) -> Verdict:
    """The verdict on B against A from their timed samples (milliseconds), and their SM clocks
    (MHz) where both runs recorded one."""
    a = np.asarray(a_ms, dtype=np.float64)
    b = np.asarray(b_ms, dtype=np.float64)
    median_a, median_b = float(np.median(a)), float(np.median(b))
    speedup = median_a / median_b
    if min(a.size, b.size) < thresholds.min_samples:
        return Verdict(UNCLEAR, speedup, math.nan, math.nan, math.nan, median_a, median_b,
                       a.size, b.size,
                       note=f"fewer than {thresholds.min_samples} samples on a side")
    rng = np.random.default_rng(thresholds.seed)
    ratios = bootstrap_medians(a, thresholds.resamples, rng) / \
        bootstrap_medians(b, thresholds.resamples, rng)
    low, high = (float(v) for v in np.percentile(ratios, [2.5, 97.5]))
    p = mann_whitney_p(a, b)
    band_low, band_high = thresholds.band
    significant = p < thresholds.alpha
    if significant and speedup >= band_high:
        verdict = FASTER
    elif significant and speedup <= band_low:
        verdict = SLOWER
    elif band_low <= low and high <= band_high:
        verdict = SAME
    else:
        verdict = UNCLEAR
    note = ""
    if verdict == UNCLEAR:
        note = "not significant" if not significant else "the interval crosses the band"
    clock_speedup = None
    if clock_a and clock_b and clock_a > 0 and clock_b > 0:
        clock_speedup = speedup * clock_a / clock_b
        explained = (band_low < clock_speedup < band_high
                     or (verdict == FASTER and clock_speedup <= 1)
                     or (verdict == SLOWER and clock_speedup >= 1))
        if verdict in (FASTER, SLOWER) and explained:
            note = (f"{verdict.lower()} at the recorded clocks, not at equal SM clocks "
                    f"(A {clock_a:.0f} MHz, B {clock_b:.0f} MHz: {clock_speedup:.3f}x)")
            verdict = UNCLEAR
    return Verdict(verdict, speedup, low, high, p, median_a, median_b, a.size, b.size,
                   clock_speedup, note)
