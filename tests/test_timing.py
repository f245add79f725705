"""Timing: warm-up samples are dropped, and an L2 flush runs before every sample, untimed."""

import mlflow

from conftest import compose_config
from runner.app import run
from runner.backends.opencl import OpenCLBackend
from runner.timing import TimeStats, measure


def test_measure_drops_the_warm_up_and_flushes_before_every_sample():
    calls = []
    samples = iter(range(100))
    taken = measure(lambda: calls.append("time") or float(next(samples)), warmup=2, repeats=3,
                    label="test", before_each=lambda: calls.append("flush"))
    assert taken == [2.0, 3.0, 4.0]
    assert calls == ["flush", "time"] * 5


def test_stats_are_the_median_and_quartiles():
    stats = TimeStats.of([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (stats.median, stats.min, stats.max, stats.q1, stats.q3) == (3.0, 1.0, 5.0, 2.0, 4.0)


def test_flush_l2_flushes_before_every_kernel_and_baseline_sample(tmp_path, monkeypatch):
    flushes = []
    real = OpenCLBackend.flush_cache
    monkeypatch.setattr(OpenCLBackend, "flush_cache",
                        lambda self: flushes.append(1) or real(self))
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose_config("backend.device_type=cpu", "kernel=transpose_1", "m=40", "n=24",
                         "timing.warmup=2", "timing.repeats=4", "timing.flush_l2=true",
                         f"tracking.uri={store}")
    assert run(cfg) > 0
    assert len(flushes) == 2 * (2 + 4), "kernel and device-copy samples, warm-up included"
    mlflow.set_tracking_uri(store)
    (recorded,) = mlflow.search_runs(experiment_names=["gemmlab"], output_format="list")
    assert recorded.data.params["timing.flush_l2"] == "True"
