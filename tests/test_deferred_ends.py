"""A sweep's CUDA jobs end their records beside the next job (runner/record/tracking.py,
`Recorder(deferred_end=True)` and `_DeferredEnds`): the end is written whole, with the status
and end time of the moment the job ended, while the next job's worker runs it (supervisor's
`relaying`) or when something is about to read the store (`flush_records`); never lost."""

import threading
import time

import mlflow
import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from runner.job.supervisor import relaying
from runner.record import names
from runner.record.tracking import Recorder, _DeferredEnds, flush_records


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    yield OmegaConf.create({"uri": uri, "experiment": "deferred"})
    flush_records()
    relaying.clear()


def ended_job(store, key=None, name="job") -> Recorder:
    recorder = Recorder(store, name, deferred_end=True)
    recorder.params({"kernel.name": "matmul_9"})
    recorder.metrics({names.GFLOPS: 123.0})
    recorder.tags({names.KERNEL: "matmul_9", **({names.MEASUREMENT_KEY: key} if key else {})})
    recorder.text("hello\n", "source/k.cu")
    recorder.finish()
    return recorder


def status(store, recorder: Recorder) -> str:
    return MlflowClient(store.uri).get_run(recorder.run_id).info.status


def test_the_end_waits_then_is_written_whole_with_the_jobs_end_time(store):
    recorder = ended_job(store)
    ended_at = time.time() * 1000
    assert mlflow.active_run() is None  # no fluent run left open for the next job
    time.sleep(0.3)
    assert status(store, recorder) == "RUNNING"  # nobody relays, nobody reads: not yet
    flush_records()
    run = MlflowClient(store.uri).get_run(recorder.run_id)
    assert run.info.status == "FINISHED"
    assert run.info.end_time <= ended_at
    assert run.data.metrics[names.GFLOPS] == 123.0
    assert run.data.params["kernel.name"] == "matmul_9"
    assert run.data.tags[names.STATUS] == "ok"
    assert "123" in run.info.run_name  # the name finish() gave it, from the rate
    files = [f.path for f in MlflowClient(store.uri).list_artifacts(recorder.run_id, "source")]
    assert files == ["source/k.cu"]


def test_the_end_is_written_while_a_job_is_relayed(store):
    recorder = ended_job(store)
    relaying.set()
    deadline = time.monotonic() + 10
    while status(store, recorder) == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status(store, recorder) == "FINISHED"


def test_a_lookup_waits_only_for_an_end_with_its_key(store):
    recorder = ended_job(store, key="abc")
    flush_records("another key")
    assert status(store, recorder) == "RUNNING"
    flush_records("abc")
    assert status(store, recorder) == "FINISHED"


def test_failed_and_killed_ends_keep_their_status(store):
    failed = Recorder(store, "failed", deferred_end=True)
    failed.finish("it broke")
    killed = Recorder(store, "killed", deferred_end=True)
    killed.finish("Ctrl-C", status="killed")
    flush_records()
    client = MlflowClient(store.uri)
    assert client.get_run(failed.run_id).info.status == "FAILED"
    assert client.get_run(failed.run_id).data.tags[names.FAILURE_REASON] == "it broke"
    assert client.get_run(killed.run_id).info.status == "KILLED"


def test_ends_are_written_in_order_and_an_error_is_raised_once():
    ends = _DeferredEnds()
    written = []

    def fails():
        raise OSError("disk full")

    ends.put(written.append, 1)
    ends.put(fails)
    ends.put(written.append, 3)
    with pytest.raises(OSError, match="disk full"):
        ends.flush()
    assert written == [1, 3]  # the others still written
    ends.flush()  # said once


def test_a_flush_from_another_thread_waits_for_the_write_in_progress():
    ends = _DeferredEnds()
    started, release = threading.Event(), threading.Event()
    written = []

    def slow(value):
        started.set()
        release.wait(5)
        written.append(value)

    ends.put(slow, 1)
    flusher = threading.Thread(target=ends.flush)
    flusher.start()
    assert started.wait(5)
    flusher.join(0.2)
    assert flusher.is_alive()  # still writing: the flush waits
    release.set()
    flusher.join(5)
    assert written == [1] and not ends.pending()


def test_only_sweep_jobs_that_may_end_late_are_deferred(monkeypatch):
    from runner import app

    cfg = OmegaConf.create({"backend": {"name": "cuda"}, "isolate": True, "check": {}})
    assert not app._ends_beside_the_next_job(cfg, None)  # a single run
    monkeypatch.setattr(app.HydraConfig, "initialized", lambda: True)
    monkeypatch.setattr(app.HydraConfig, "get", lambda: OmegaConf.create(
        {"launcher": {"_target_": "hydra_plugins.gemmlab_launcher.gemmlab_launcher."
                                  "GemmlabLauncher"}}))
    assert app._ends_beside_the_next_job(cfg, "parent")
    for change in ({"backend": {"name": "opencl"}}, {"isolate": False},
                   {"check": {"sanitizer": "memcheck"}}):
        assert not app._ends_beside_the_next_job(OmegaConf.merge(cfg, change), "parent")
    monkeypatch.setattr(app.HydraConfig, "get", lambda: OmegaConf.create(
        {"launcher": {"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher."
                                  "JoblibLauncher"}}))
    assert not app._ends_beside_the_next_job(cfg, "parent")



# On an NVIDIA GPU (marked `gpu`, skipped without one): whole CUDA sweeps.
import subprocess  # noqa: E402
import sys  # noqa: E402

from conftest import requires_cuda_gpu  # noqa: E402
from test_interrupts import ctrl_c_once  # noqa: E402


def _jobs(uri: str) -> list:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("gemmlab")
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    return [run for run in runs if names.PARENT_RUN_ID in run.data.tags
            and run.data.tags.get("gemmlab.series") != "true"]


@pytest.mark.gpu
@requires_cuda_gpu
def test_a_cuda_sweeps_records_are_whole_and_end_when_their_jobs_did(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run([sys.executable, "-m", "runner", "-m", "backend=cuda",
                           "kernel=matmul_4,matmul_9", "size=256,512", f"tracking.uri={uri}",
                           "tracking.inspect=false"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = _jobs(uri)
    assert len(jobs) == 4
    for run in jobs:
        assert run.info.status == "FINISHED"
        assert run.data.metrics[names.GFLOPS] > 0
        assert run.data.params[names.KERNEL_NAME] in ("matmul_4", "matmul_9")
        assert "GFLOPS" in run.info.run_name
    for earlier, later in zip(jobs, jobs[1:]):  # the job's own end, not the write's
        assert earlier.info.end_time <= later.info.start_time


@pytest.mark.gpu
@requires_cuda_gpu
def test_ctrl_c_in_a_cuda_sweep_leaves_every_record_whole_and_none_running(tmp_path):
    """Ctrl-C while the second job times (each job times for 4 s): the first job's end, written
    beside the second, is whole; the second is KILLED; nothing stays RUNNING."""
    from runner.record.store import ensure_store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    command = [sys.executable, "-m", "runner", "-m", "backend=cuda", "kernel=matmul_4",
               "size=256,320,384", "timing.warmup=0", "timing.target_noise=1e-9",
               "timing.min_time_s=4", "timing.max_time_s=4", "tracking.inspect=false",
               f"tracking.uri={uri}"]
    ensure_store(uri)

    def the_second_job_just_started() -> bool:
        jobs = _jobs(uri)
        return len(jobs) >= 2 and time.time() * 1000 - jobs[1].info.start_time < 2000

    returncode, _, stderr = ctrl_c_once(command, tmp_path, the_second_job_just_started)
    assert returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    jobs = _jobs(uri)
    assert [run.info.status for run in jobs] == ["FINISHED", "KILLED"]
    assert jobs[0].data.metrics[names.GFLOPS] > 0 and jobs[0].data.params
    assert jobs[1].data.tags[names.STATUS] == "killed"
