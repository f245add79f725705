"""Adaptive repetitions (timing.target_noise): sampling stops once the median is stable, runs to
timing.max_time_s when it never is, and the run records the noise reached and the count. The
samples come from a fake timer and a fake clock: no device, no real time."""

import math

import mlflow
import numpy as np
import pytest
from conftest import compose_config

from runner.app import run
from runner.config.validate import validate
from runner.errors import Refused
from runner.record import names
from runner.run.timing import (
    MIN_SAMPLES,
    Repetitions,
    TimeStats,
    measure,
    median_interval_ranks,
    median_noise,
)


class FakeDevice:
    """Samples drawn from `draw`, each advancing a fake clock by its own length plus a fixed
    host overhead, so that the adaptive mode's time limits see the time the samples took."""

    def __init__(self, draw, overhead_s: float = 1e-4):
        self.draw, self.overhead_s, self.now, self.calls = draw, overhead_s, 0.0, 0

    def clock(self) -> float:
        return self.now

    def time_once_ms(self) -> float:
        self.calls += 1
        sample = float(self.draw())
        self.now += sample * 1e-3 + self.overhead_s
        return sample


def test_the_interval_ranks_are_the_exact_binomial_ones_at_10_and_20_samples():
    # Exact: P(X <= 1) for X ~ Bin(10, 1/2) is 0.011, so [x(2), x(9)] covers 97.9%;
    # P(X <= 5) for Bin(20, 1/2) is 0.021, so [x(6), x(15)] covers 95.9%.
    assert median_interval_ranks(10) == (2, 9)
    assert median_interval_ranks(20) == (6, 15)
    assert median_interval_ranks(3) == (1, 3)  # too few: the whole range


def test_noise_is_the_half_width_of_the_interval_relative_to_the_median():
    samples = [1.0] * 5 + [1.02] * 5  # median 1.01, [x(2), x(9)] = [1.0, 1.02]
    assert median_noise(samples) == pytest.approx(0.01 / 1.01)
    assert median_noise([]) == math.inf
    assert TimeStats.of(samples).noise == pytest.approx(0.01 / 1.01)


def test_noise_ignores_a_few_outliers():
    quiet = [1.0 + 0.001 * i for i in range(40)]
    with_outliers = quiet[:-3] + [50.0, 80.0, 1000.0]
    assert median_noise(with_outliers) < 0.02


def test_quiet_samples_stop_at_the_minimum_count():
    rng = np.random.default_rng(0)
    device = FakeDevice(lambda: rng.normal(1.0, 0.001))  # ±0.1%
    rule = Repetitions(20, target_noise=0.005, min_time_s=0.0, max_time_s=10.0)
    samples = measure(device.time_once_ms, 3, rule, "test", clock=device.clock)
    assert len(samples) == MIN_SAMPLES
    assert device.calls == 3 + MIN_SAMPLES, "the warm-up is taken and dropped"
    assert median_noise(samples) <= 0.005


def test_quiet_samples_run_at_least_min_time():
    rng = np.random.default_rng(1)
    device = FakeDevice(lambda: rng.normal(1.0, 0.001), overhead_s=0.0)  # 1 ms a sample
    rule = Repetitions(20, target_noise=0.005, min_time_s=0.1, max_time_s=10.0)
    samples = measure(device.time_once_ms, 0, rule, "test", clock=device.clock)
    assert 99 <= len(samples) <= 101, "0.1 s of 1 ms samples"


def test_noisier_samples_take_more_until_the_target():
    rng = np.random.default_rng(2)
    device = FakeDevice(lambda: rng.lognormal(0.0, 0.05))  # about ±5% a sample
    rule = Repetitions(20, target_noise=0.005, min_time_s=0.0, max_time_s=100.0)
    samples = measure(device.time_once_ms, 0, rule, "test", clock=device.clock)
    assert MIN_SAMPLES < len(samples) < 2000
    assert median_noise(samples) <= 0.005
    assert device.now < 100.0


def test_noisy_samples_run_to_max_time():
    rng = np.random.default_rng(3)
    device = FakeDevice(lambda: rng.lognormal(0.0, 1.0), overhead_s=0.0)  # noise far above 0.1%
    rule = Repetitions(20, target_noise=0.001, min_time_s=0.0, max_time_s=2.0)
    samples = measure(device.time_once_ms, 0, rule, "test", clock=device.clock)
    assert device.now >= 2.0
    assert sum(samples[:-1]) * 1e-3 < 2.0, "it stopped at the first sample past max_time_s"
    assert median_noise(samples) > 0.001


def test_max_time_stops_even_below_the_minimum_count():
    device = FakeDevice(lambda: 1000.0)  # one second a sample
    rule = Repetitions(20, target_noise=0.005, min_time_s=0.0, max_time_s=2.5)
    assert len(measure(device.time_once_ms, 0, rule, "test", clock=device.clock)) == 3


def test_fixed_repeats_stay_the_default():
    device = FakeDevice(lambda: 1.0)
    assert len(measure(device.time_once_ms, 1, Repetitions(7), "test", clock=device.clock)) == 7
    assert not Repetitions.of(compose_config().timing).adaptive


def test_the_adaptive_bar_total_follows_the_estimate(monkeypatch):
    from runner.terminal import progress as progress_bars

    seen = []
    monkeypatch.setattr(progress_bars, "_forward", seen.append)
    rng = np.random.default_rng(4)
    device = FakeDevice(lambda: rng.lognormal(0.0, 0.05))
    rule = Repetitions(20, target_noise=0.005, min_time_s=0.0, max_time_s=100.0)
    samples = measure(device.time_once_ms, 2, rule, "test", clock=device.clock)
    totals = [message[2] for message in seen if message[:2] == ("bar", "total")]
    assert seen[0][:2] == ("bar", "start") and seen[0][3] == 2 + MIN_SAMPLES
    assert totals and all(total > 2 + MIN_SAMPLES for total in totals)
    advances = sum(message[2] for message in seen if message[:2] == ("bar", "advance"))
    assert advances == 2 + len(samples)


def test_settings_out_of_range_are_refused():
    with pytest.raises(Refused, match="timing.target_noise"):
        validate(compose_config("timing.target_noise=0"))
    with pytest.raises(Refused, match="min_time_s"):
        validate(compose_config("timing.target_noise=0.01", "timing.min_time_s=5",
                                "timing.max_time_s=1"))
    validate(compose_config("timing.target_noise=0.01"))


def test_a_run_records_the_noise_and_count_and_both_sample_files(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose_config("backend.device_type=cpu", "kernel=matmul_1", "size=32",
                         "timing.warmup=1", "timing.target_noise=0.5", "timing.min_time_s=0",
                         "timing.max_time_s=5", f"tracking.uri={store}")
    assert run(cfg) > 0
    mlflow.set_tracking_uri(store)
    (recorded,) = mlflow.search_runs(experiment_names=["gemmlab"], output_format="list")
    metrics, params = recorded.data.metrics, recorded.data.params
    assert metrics[names.TIME_SAMPLES] >= MIN_SAMPLES
    assert 0 <= metrics[names.TIME_NOISE] <= 0.5
    assert metrics[names.VENDOR_TIME_SAMPLES] >= MIN_SAMPLES
    assert names.VENDOR_TIME_NOISE in metrics
    assert params[names.TIMING_TARGET_NOISE] == "0.5"
    client = mlflow.MlflowClient()
    for artifact, count in ((names.SAMPLES_ARTIFACT, metrics[names.TIME_SAMPLES]),
                            (names.VENDOR_SAMPLES_ARTIFACT, metrics[names.VENDOR_TIME_SAMPLES])):
        path = client.download_artifacts(recorded.info.run_id, artifact, str(tmp_path))
        assert len(open(path).read().split()) == count
