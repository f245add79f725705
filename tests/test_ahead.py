"""A sweep's next job prepared in the worker while the sweep's process sets it up
(runner/run/ahead.py): its inputs, reference and guarded buffers ready and taken by the job,
nothing left behind, nothing measured ahead on a CPU, nothing lost when it cannot be prepared.
CPU only (the vendor baseline ahead of a GPU job: tests/test_gpu_sweep.py)."""

import os
import subprocess
import sys

import pytest
from conftest import compose_config, requires_cuda_gpu
from mlflow.tracking import MlflowClient

from runner.backends import make_backend
from runner.config.spec import ProblemSize, plan_kernel
from runner.record import names
from runner.run import guards, limits, operations, vendor
from runner.run import ahead
from runner.run.ahead import AHEAD_PARTS, draw_ahead, finish_drawing, prepare_ahead
from runner.run.execute import execute
from runner.run.operations import clear_caches, make_problem
from runner.run.phases import AHEAD, PHASES, metric

CPU = ["backend.device_type=cpu", "timing.repeats=3", "timing.warmup=1"]


@pytest.fixture(autouse=True)
def fresh():
    clear_caches()
    guards.drop_staged()
    yield
    clear_caches()
    guards.drop_staged()


class Recorder:
    def __init__(self):
        self.metrics_seen = {}

    def text(self, text, name):
        pass

    def metrics(self, values):
        self.metrics_seen.update(values)

    def tags(self, values):
        pass


def _uploads_of_a_run(cfg, monkeypatch) -> int:
    """How many buffers the run's own execute makes on the device (uploaded, or filled there
    and its values written in)."""
    backend = make_backend(cfg.backend)
    calls = []
    upload, filled = type(backend).upload, type(backend).filled
    monkeypatch.setattr(type(backend), "upload",
                        lambda self, host: calls.append(host.size) or upload(self, host))
    monkeypatch.setattr(type(backend), "filled",
                        lambda self, count, bits: calls.append(count) or filled(self, count, bits))
    outcome = execute(cfg, backend, plan_kernel(cfg.kernel, ProblemSize(cfg.m, cfg.n, cfg.k)),
                      Recorder())
    monkeypatch.setattr(type(backend), "upload", upload)
    assert outcome.check.passed
    return len(calls)


def test_the_next_job_finds_its_inputs_reference_and_buffers_ready(monkeypatch):
    cfg = compose_config(*CPU, "kernel=matmul_2", "m=48", "n=40", "k=32")
    uploads_alone = _uploads_of_a_run(cfg, monkeypatch)
    clear_caches()
    prepare_ahead(cfg)
    plan = plan_kernel(cfg.kernel, ProblemSize(48, 40, 32))
    problem = make_problem(plan.operation, plan.size, cfg.seed)
    kept = operations._problems.owner(problem.inputs["A"], problem.inputs["B"])
    assert kept is not None and kept.references  # drawn and its float64 reference made
    staged = list(guards._staged.values())
    assert len(staged) == 3  # A and B uploaded between their guards, C allocated
    assert sorted(id(buffer.original) for buffer in staged if buffer.original is not None) == \
        sorted(id(problem.inputs[name]) for name in ("A", "B"))
    assert _uploads_of_a_run(cfg, monkeypatch) == uploads_alone - 3  # the job took all three
    assert guards._staged == {}


def _as_gpu(monkeypatch, cfg) -> None:
    """The CPU device of `cfg` made to say it is a GPU: what draw_ahead asks before drawing."""
    import dataclasses

    backend = make_backend(cfg.backend)
    info = dataclasses.replace(backend.device_info(), device_type="gpu")
    monkeypatch.setattr(backend, "device_info", lambda: info)


def test_on_a_gpu_the_job_after_next_has_its_inputs_drawn_while_this_one_runs(monkeypatch):
    cfg = compose_config(*CPU, "kernel=matmul_2", "m=48", "n=40", "k=32")
    _as_gpu(monkeypatch, cfg)
    started = []
    draw = operations.draw_problem
    monkeypatch.setattr(operations, "draw_problem",
                        lambda *args: started.append(ahead._drawing) or draw(*args))
    draw_ahead(cfg)
    finish_drawing(cfg)
    assert started and started[0] is not None  # drawn in the thread, which is now joined
    assert ahead._drawing is None
    plan = plan_kernel(cfg.kernel, ProblemSize(48, 40, 32))
    problem = make_problem(plan.operation, plan.size, cfg.seed)
    assert len(started) == 1  # the job's own call takes the arrays drawn ahead
    kept = operations._problems.owner(problem.inputs["A"], problem.inputs["B"])
    assert kept is not None and kept.references  # and their float64 reference


def test_a_job_waits_only_for_its_own_inputs_drawn_ahead(monkeypatch):
    import threading

    cfg = compose_config(*CPU, "kernel=matmul_2", "m=48", "n=40", "k=32")
    _as_gpu(monkeypatch, cfg)
    release = threading.Event()
    draw = operations.draw_problem
    monkeypatch.setattr(operations, "draw_problem",
                        lambda *args: release.wait(30) and draw(*args))
    draw_ahead(cfg)
    finish_drawing(compose_config(*CPU, "kernel=matmul_2", "m=16", "n=16", "k=16"))
    assert ahead._drawing is not None and ahead._drawing.is_alive()  # another job's: not waited
    release.set()
    finish_drawing(compose_config(*CPU, "kernel=matmul_3", "m=48", "n=40", "k=32"))
    assert ahead._drawing is None  # the same problem under another kernel: waited for


def test_nothing_is_drawn_ahead_on_a_cpu_or_for_a_job_of_its_own(monkeypatch):
    cfg = compose_config(*CPU, "kernel=matmul_2", "size=32")
    draw_ahead(cfg)  # its cores time the kernel
    assert ahead._drawing is None and len(operations._problems) == 0
    _as_gpu(monkeypatch, cfg)
    draw_ahead(compose_config(*CPU, "kernel=matmul_2", "size=32", "gpus=1"))
    assert ahead._drawing is None and len(operations._problems) == 0


def test_a_job_that_cannot_be_prepared_is_left_to_its_run(monkeypatch):
    cfg = compose_config(*CPU, "kernel=matmul_2", "size=64")
    monkeypatch.setattr(limits, "available_host_bytes", lambda: 1024)  # refused for memory
    assert prepare_ahead(cfg)[AHEAD] >= 0.0  # no exception: the job itself says why
    assert len(operations._problems) == 0 and guards._staged == {}
    broken = compose_config(*CPU, "kernel=matmul_2", "size=64", "kernel.params.TS=7")
    monkeypatch.undo()
    prepare_ahead(broken)  # a tiling the job will refuse: nothing raised here either


def test_no_baseline_is_measured_ahead_on_a_cpu(monkeypatch):
    measured = []
    monkeypatch.setattr(vendor, "vendor_baseline", lambda *args, **kwargs: measured.append(1))
    prepare_ahead(compose_config(*CPU, "kernel=matmul_2", "size=32"))
    assert measured == []  # the sweep's own process would share the CPUs with it
    assert len(guards._staged) == 3


def test_the_device_is_opened_as_the_jobs_will_ask_for_it(monkeypatch):
    from omegaconf import OmegaConf

    from runner import backends
    from runner.run.ahead import warm_up

    monkeypatch.setattr(backends, "_made", {})  # a fresh worker's
    cfg = compose_config(*CPU, "kernel=matmul_2")
    warm_up(OmegaConf.to_container(cfg.backend, resolve=True, enum_to_str=True))
    assert len(backends._made) == 1
    opened = next(iter(backends._made.values()))
    assert make_backend(cfg.backend) is opened  # the job's own call: the backend opened ahead
    warm_up({"name": "no-such-backend"})  # said by the first job, not here


def test_buffers_staged_for_a_job_that_does_not_take_them_are_dropped(tmp_path):
    from runner.app import run

    prepare_ahead(compose_config(*CPU, "kernel=matmul_2", "size=40"))
    assert guards._staged
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert run(compose_config(*CPU, "kernel=matmul_2", "size=24", "isolate=false",
                              f"tracking.uri={store}")) is not None
    assert guards._staged == {}


def test_a_sweeps_jobs_record_their_stages_and_what_was_prepared_ahead(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "runner", "-m", *CPU, "kernel=matmul_2", "size=24,40,56",
         "tracking.inspect=false", f"tracking.uri={store}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "where the time went, s per job:" in done.stdout
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("gemmlab").experiment_id
    jobs = client.search_runs([experiment], "tags.`gemmlab.status` = 'ok'",
                              order_by=["attributes.start_time ASC"])
    assert len(jobs) == 3
    for job in jobs:
        assert job.data.metrics[names.CHECK_PASSED] == 1.0
        assert all(metric(phase) in job.data.metrics for phase in ("setup", "check", "time"))
        assert set(PHASES) >= {key[len("time_s/"):] for key in job.data.metrics
                               if key.startswith("time_s/") and "/ahead/" not in key} - {
            "kernel_work", "record_open", "worker", AHEAD}
        parts = {key[len("time_s/ahead/"):]: seconds for key, seconds in job.data.metrics.items()
                 if key.startswith("time_s/ahead/")}
        assert set(parts) <= set(AHEAD_PARTS) and {"draw", "inputs", "upload"} <= set(parts)
        assert sum(parts.values()) == pytest.approx(job.data.metrics[metric(AHEAD)])
    # the first prepared as soon as it was composed, each later one while the last ended
    assert all(job.data.metrics[metric(AHEAD)] > 0 for job in jobs)


@pytest.mark.gpu
@requires_cuda_gpu
def test_a_gpu_sweeps_baselines_are_measured_ahead_of_their_jobs(tmp_path):
    """Each new shape's cuBLAS baselines (SGEMM, and TF32 for matmul_13) measured while the
    sweep's process set the job up: the job's own vendor stage is then a lookup, and its % of
    cuBLAS is still recorded."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "runner", "-m", "backend=cuda", "kernel=matmul_9,matmul_13",
         "size=1024,2048", "timing.repeats=10", f"tracking.uri={store}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("gemmlab").experiment_id
    jobs = client.search_runs([experiment], "tags.`gemmlab.status` = 'ok'",
                              order_by=["attributes.start_time ASC"])
    assert len(jobs) == 4
    for job in jobs[1:]:
        metrics = job.data.metrics
        assert metrics[names.PCT_OF_VENDOR] > 0
        assert metrics[metric(AHEAD)] > metrics[metric("vendor")], metrics
    assert jobs[1].data.metrics[metric(f"{AHEAD}/vendor")] > 0  # 2048's baselines, ahead
    assert jobs[-1].data.metrics[names.PCT_OF_VENDOR_TF32] > 0  # matmul_13 at 2048


def test_inputs_drawn_in_a_background_thread_pause_while_launches_are_timed():
    """The worker's draw-ahead thread takes the interpreter lock between its blocks; inside a
    timed window (the kernel's samples, the checked launch, a baseline's samples) it waits, so
    no launch is held back, and it goes on to the same values once the window closes."""
    import threading
    import time as clock

    import numpy as np

    from runner.run.timing import measure, timed_window

    rows, cols = 1024, 130  # two draw blocks and a part
    expected = operations._uniform_float32(11, 0, rows, cols)
    drawn = {}
    with timed_window():
        thread = threading.Thread(
            target=lambda: drawn.update(out=operations._uniform_float32(11, 0, rows, cols)))
        thread.start()
        thread.join(timeout=0.5)
        assert thread.is_alive() and not drawn  # paused at its first block
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert np.array_equal(drawn["out"], expected)

    # measure() is a timed window: a draw started during its first sample (it would take a
    # millisecond) has not finished when the last sample is taken
    thread = threading.Thread(
        target=lambda: drawn.update(again=operations._uniform_float32(11, 0, rows, cols)))
    finished_during = []

    def sample() -> float:
        if not thread.is_alive() and "again" not in drawn and not finished_during:
            thread.start()
        clock.sleep(0.05)
        finished_during.append("again" in drawn)
        return 1.0

    samples = measure(sample, 1, 4, "a draw paused")
    thread.join(timeout=30)
    assert len(samples) == 4 and not any(finished_during)
    assert np.array_equal(drawn["again"], expected)
