"""compare's statistics on synthetic samples with known answers (runner/results/verdict.py)."""

import numpy as np
import pytest

from runner.results.verdict import (
    FASTER,
    SAME,
    SLOWER,
    UNCLEAR,
    Thresholds,
    bootstrap_medians,
    judge,
)


def gpu_like(rng, median_ms: float, count: int = 60, spread: float = 0.01) -> np.ndarray:
    """Skewed samples around a median: a floor plus a lognormal tail, ±`spread` or so."""
    return median_ms * (1 - spread + rng.lognormal(np.log(spread), 0.5, count))


@pytest.mark.parametrize("seed", range(5))
def test_identical_distributions_are_the_same(seed):
    rng = np.random.default_rng(seed)
    verdict = judge(gpu_like(rng, 1.0), gpu_like(rng, 1.0))
    assert verdict.verdict == SAME
    assert verdict.low < verdict.speedup < verdict.high


@pytest.mark.parametrize("seed", range(3))
def test_a_10_percent_shift_is_faster_or_slower(seed):
    rng = np.random.default_rng(seed)
    a = gpu_like(rng, 1.0)
    faster = judge(a, gpu_like(rng, 1 / 1.1))
    assert faster.verdict == FASTER and faster.speedup == pytest.approx(1.1, rel=0.02)
    assert faster.low < 1.1 < faster.high and faster.p_value < 1e-6
    slower = judge(a, gpu_like(rng, 1.1))
    assert slower.verdict == SLOWER and slower.change == pytest.approx(0.1, abs=0.02)


def test_a_significant_but_tiny_difference_is_the_same():
    rng = np.random.default_rng(7)
    a, b = gpu_like(rng, 1.0, 5000, 0.002), gpu_like(rng, 1.001, 5000, 0.002)  # 0.1%
    verdict = judge(a, b)
    assert verdict.p_value < 0.05, "significant"
    assert verdict.verdict == SAME, "but below the 2% that counts"


def test_heavy_outliers_do_not_flip_the_verdict():
    rng = np.random.default_rng(8)
    a, b = gpu_like(rng, 1.0), gpu_like(rng, 1.0)
    b_out = b.copy()
    b_out[::8] *= 50  # one launch in eight 50 times as long (a context switch, a neighbour)
    assert judge(a, b_out).verdict == SAME
    a_out = a.copy()
    a_out[::10] *= 1000
    faster = gpu_like(rng, 1 / 1.1)
    faster[::10] *= 100
    assert judge(a_out, faster).verdict == FASTER, "B faster though a tenth of its launches crawl"


def test_too_noisy_to_tell_is_unclear():
    rng = np.random.default_rng(9)
    a = rng.lognormal(0.0, 0.5, 12)
    b = rng.lognormal(0.03, 0.5, 12)
    verdict = judge(a, b)
    assert verdict.verdict == UNCLEAR and verdict.high - verdict.low > 0.2


def test_too_few_samples_are_unclear():
    assert judge([1.0, 1.0, 1.0], [2.0, 2.0, 2.0]).verdict == UNCLEAR


def test_a_difference_the_sm_clock_explains_is_unclear():
    rng = np.random.default_rng(10)
    a = gpu_like(rng, 1.0)
    b = gpu_like(rng, 1.1)  # 10% slower ...
    assert judge(a, b).verdict == SLOWER
    verdict = judge(a, b, clock_a=1980.0, clock_b=1800.0)  # ... at a 10% lower clock
    assert verdict.verdict == UNCLEAR
    assert verdict.clock_speedup == pytest.approx(1.0, abs=0.02)
    assert "clock" in verdict.note
    # The same clocks explain nothing: still SLOWER.
    assert judge(a, b, clock_a=1980.0, clock_b=1980.0).verdict == SLOWER
    # A clock difference too small to explain it: still SLOWER.
    assert judge(a, b, clock_a=1980.0, clock_b=1960.0).verdict == SLOWER


def test_min_effect_is_the_band():
    rng = np.random.default_rng(11)
    a, b = gpu_like(rng, 1.0, 500, 0.002), gpu_like(rng, 1.03, 500, 0.002)  # 3% slower
    assert judge(a, b).verdict == SLOWER
    assert judge(a, b, Thresholds(min_effect=0.05)).verdict == SAME


@pytest.mark.parametrize("count", [9, 10, 31])
def test_the_bootstrap_medians_match_resampling(count):
    """The order-statistic draw gives the distribution that resampling with replacement does."""
    rng = np.random.default_rng(count)
    samples = rng.lognormal(0.0, 0.3, count)
    drawn = bootstrap_medians(samples, 40_000, np.random.default_rng(1))
    resampled = np.median(rng.choice(samples, (40_000, count)), axis=1)
    for q in (2.5, 25, 50, 75, 97.5):
        assert np.percentile(drawn, q) == pytest.approx(np.percentile(resampled, q), rel=0.03)
