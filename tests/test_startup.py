"""A single run's start and end (`python -m runner kernel=matmul_1 size=16` within 2.5 s on an
idle 2-core CPU): its MLflow run opens in a thread while the job's worker starts and sets its
device up (runner/record/tracking.py, Recorder(background=True); runner/app.py), the worker
compiles and times nothing before the run is open, and the process ends without the
interpreter's teardown (runner/cli.py). What a run records, and every outcome's record
(failures, a store that cannot be opened, Ctrl-C), stay as they were."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import compose_config
from filelock import FileLock
from mlflow.tracking import MlflowClient

from runner.app import run
from runner.errors import RunError
from runner.job import supervisor
from runner.record import tracking
from runner.record.store import ensure_store
from runner.record.tracking import Recorder, RecordNotOpened, comparable_params

QUICK = ["backend.device_type=cpu", "kernel=matmul_1", "size=16", "timing.repeats=3",
         "timing.warmup=0"]
CUDA = ["backend=cuda", "kernel=matmul_1", "size=16", "timing.repeats=3", "timing.warmup=0"]
ERROR = "gemmlab: error:"
# What a busy host may add or take away (a noisy baseline gives no %): not what the
# opening decides.
NOISY = {"vendor.unusable", "perf/pct_of_vendor", "perf/pct_of_reference"}


def _runs(uri: str) -> list:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("gemmlab")
    if experiment is None:
        return []
    return client.search_runs([experiment.experiment_id])


def _artifacts(client: MlflowClient, run_id: str, path=None) -> set:
    found = set()
    for item in client.list_artifacts(run_id, path):
        found |= _artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return found


def _gemmlab(cwd: Path, *overrides: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["COLUMNS"] = "400"
    return subprocess.run([sys.executable, "-m", "runner", *overrides], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def openings(monkeypatch):
    """Each Recorder's `background` flag, in the order they were made."""
    made = []
    original = Recorder.__init__

    def recording(self, *args, **kwargs):
        made.append(kwargs.get("background", False))
        original(self, *args, **kwargs)

    monkeypatch.setattr(Recorder, "__init__", recording)
    return made


def test_a_run_opened_in_the_background_records_what_a_run_opened_first_records(
        tmp_path, openings):
    """A store that exists: the run opens in the background; one yet to be created: first."""
    background, first = (f"sqlite:///{tmp_path / name / 'mlflow.db'}"
                         for name in ("background", "first"))
    ensure_store(background)
    assert run(compose_config(*QUICK, f"tracking.uri={background}")) > 0
    assert run(compose_config(*QUICK, f"tracking.uri={first}")) > 0
    assert openings == [True, False]
    (opened_later,), (opened_first,) = _runs(background), _runs(first)
    for recorded in (opened_later, opened_first):
        assert recorded.info.status == "FINISHED"
        assert recorded.data.tags["gemmlab.status"] == "ok"
        assert recorded.data.metrics["time_s/record_open"] > 0
        assert recorded.data.metrics["perf/gflops"] > 0
    later, before = opened_later.data, opened_first.data
    assert later.params == before.params  # every param, written with the run's end
    assert set(later.metrics) ^ set(before.metrics) <= NOISY
    assert set(later.tags) ^ set(before.tags) <= NOISY  # the context tags of start_run too
    for same in ("mlflow.user", "mlflow.source.name", "mlflow.source.type",
                 "gemmlab.runner_version", "gemmlab.command", "gemmlab.measurement_key"):
        assert later.tags.get(same) == before.tags.get(same), same
    assert later.tags["mlflow.runName"].startswith("matmul_1 16³ · ")
    assert later.tags["mlflow.runName"].endswith(" · opencl TS=16")
    assert opened_later.info.run_name == later.tags["mlflow.runName"]
    assert _artifacts(MlflowClient(background), opened_later.info.run_id) == \
        _artifacts(MlflowClient(first), opened_first.info.run_id)
    assert (tmp_path / "background" / "mlartifacts").is_dir()


def test_the_job_compiles_and_times_only_once_the_run_is_open(tmp_path, monkeypatch, openings):
    """The worker's start and its device's setup overlap MLflow's opening; its compile, check,
    timing and the vendor's baseline wait for it, so that MLflow's import is off the CPUs they
    are timed on (and a store that cannot be opened stops the job before it compiles)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    opened, arrived = [], []
    ensure_store = tracking.ensure_store

    def slow_store(store_uri):
        time.sleep(3)
        ensure_store(store_uri)
        opened.append(time.monotonic())

    handle = supervisor._Relay.handle

    def noting(self, message):
        if message[0] == "phase":
            arrived.append((message[1], time.monotonic()))
        return handle(self, message)

    ensure_store(uri)
    monkeypatch.setattr(tracking, "ensure_store", slow_store)
    monkeypatch.setattr(supervisor._Relay, "handle", noting)
    assert run(compose_config(*QUICK, f"tracking.uri={uri}")) > 0
    assert openings == [True]
    (store_opened,) = opened
    phases = dict(arrived)
    assert phases["setup"] < store_opened  # the job was under way while the run opened
    later = [name for name in phases if name != "setup"]
    assert {"compile", "check", "time", "vendor"} <= set(later)
    assert all(phases[name] > store_opened for name in later), (phases, store_opened)
    (recorded,) = _runs(uri)
    assert recorded.info.status == "FINISHED"
    assert recorded.data.metrics["time_s/record_open"] >= 3


def test_a_background_recorder_writes_its_params_with_its_end(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose_config(*QUICK, f"tracking.uri={uri}")
    recorder = Recorder(cfg.tracking, "matmul_1 opencl 16x16x16 TS=16", background=True)
    assert not (tmp_path / "mlflow.db").exists()  # nothing opened before start()
    recorder.start()
    recorder.params(comparable_params(cfg))
    recorder.tags({"gemmlab.kernel": "matmul_1"})
    recorder.metrics({"perf/gflops": 1.5})
    recorder.text("hello\n", "notes/hello.txt")
    recorder.wait()
    client = MlflowClient(uri)
    opened = client.get_run(recorder.run_id)
    assert opened.info.status == "RUNNING" and opened.data.params == {}  # gathered, not yet out
    assert opened.data.tags["mlflow.runName"] == "matmul_1 opencl 16x16x16 TS=16"
    assert opened.data.tags["mlflow.source.type"] == "LOCAL"  # MLflow's context, as start_run
    recorder.finish()
    ended = client.get_run(recorder.run_id)
    assert ended.info.status == "FINISHED"
    assert ended.data.params == comparable_params(cfg)
    assert ended.data.metrics["perf/gflops"] == 1.5
    assert ended.data.metrics["time_s/record_open"] > 0
    assert ended.data.tags["gemmlab.status"] == "ok"
    assert ended.data.tags["mlflow.runName"].startswith("matmul_1 16³ · 1.5 GFLOPS")
    assert _artifacts(client, recorder.run_id) == {"notes/hello.txt"}


def test_a_background_recorder_that_cannot_open_says_why_where_the_run_is_needed(tmp_path):
    (tmp_path / "afile").write_text("not a folder")
    uri = f"sqlite:///{tmp_path / 'afile' / 'x.db'}"
    recorder = Recorder(compose_config(f"tracking.uri={uri}").tracking, "never", background=True)
    recorder.start()
    recorder.params({"seed": 0})
    for needs_the_run in (recorder.wait, recorder.finish):
        with pytest.raises(RecordNotOpened) as refused:
            needs_the_run()
        assert isinstance(refused.value.error, RunError)
        assert "cannot create the folder" in str(refused.value.error)


def test_a_uri_without_a_scheme_is_refused_before_any_thread():
    with pytest.raises(RunError, match="no scheme"):
        Recorder(compose_config("tracking.uri=mlflow.db").tracking, "never", background=True)


@pytest.mark.parametrize("backend", ["opencl", "cuda"])
@pytest.mark.parametrize("store", ["under a file", "not a database"])
def test_a_store_that_cannot_be_opened_is_one_line_and_exit_1(tmp_path, backend, store):
    """A folder that cannot be created: refused before the job starts (a store yet to be
    created opens first). A file that is there but is no database: the job has gone to the
    worker as the run opens in the background, and stops at its key (cuda without a GPU fails
    before it); the one line is the store's either way, as before."""
    if store == "under a file":
        (tmp_path / "afile").write_text("not a folder")
        uri, expected = f"sqlite:///{tmp_path / 'afile' / 'x.db'}", "cannot create the folder"
    else:
        (tmp_path / "text.db").write_text("not a database\n" * 100)
        uri, expected = f"sqlite:///{tmp_path / 'text.db'}", "file is not a database"
    started = time.monotonic()
    done = _gemmlab(tmp_path, *(CUDA if backend == "cuda" else QUICK), f"tracking.uri={uri}",
                    timeout=60)
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if ERROR in line]
    assert len(lines) == 1, done.stderr
    assert f"cannot record in MLflow at tracking.uri={uri}: {expected}" in lines[0]
    assert "Traceback" not in done.stdout + done.stderr
    assert "GFLOPS" not in done.stdout and "recorded" not in done.stdout
    assert elapsed < 15, f"{elapsed:.1f} s"


def test_a_single_run_ends_whole_without_the_interpreters_teardown(tmp_path):
    """The result and the store are there, the job log written to its end, the worker gone,
    exit 0; a run that failed still exits 1 with its one line."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = _gemmlab(tmp_path, *QUICK, f"tracking.uri={uri}")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and " GFLOPS · " in lines[0], done.stdout
    assert lines[1].startswith("  recorded: MLflow run ")
    (recorded,) = _runs(uri)
    assert recorded.info.status == "FINISHED"
    assert recorded.info.run_id in lines[1]
    (log,) = (tmp_path / "outputs").glob("*/*/app.log")
    assert "OpenCL device: " in log.read_text()
    worker = Path("/proc", recorded.data.tags["job.worker_pid"])
    assert not worker.exists() or b"runner.job.worker" not in (worker / "cmdline").read_bytes()

    failed = _gemmlab(tmp_path, *QUICK, "backend.platform=nosuchplatform",
                      f"tracking.uri={uri}")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert len([line for line in failed.stderr.splitlines() if ERROR in line]) == 1
    assert "recorded as FAILED: MLflow run " in failed.stderr
    statuses = sorted(run.info.status for run in _runs(uri))
    assert statuses == ["FAILED", "FINISHED"]


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signals")
def test_ctrl_c_while_the_run_opens_in_the_background_ends_it_killed(tmp_path):
    """The store's lock is held (another process upgrading the store), so the run is still
    being opened in the background when Ctrl-C comes, the job at its key: the command waits
    for the opening, then ends the run KILLED, exit 130, one line."""
    database = tmp_path / "mlflow.db"
    uri = f"sqlite:///{database}"
    ensure_store(uri)  # a store that exists: the run opens in the background
    lock = FileLock(str(database) + ".lock")
    lock.acquire()
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["COLUMNS"] = "400"
    process = subprocess.Popen(  # as a shell starts it from a terminal: SIGINT at its default
        [sys.executable, "-m", "runner", *QUICK, f"tracking.uri={uri}"], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()
            logs = list((tmp_path / "outputs").glob("*/*/app.log"))
            if logs and "waiting for another gemmlab process" in logs[0].read_text():
                break
            time.sleep(0.1)
        else:
            pytest.fail("the run's opening never waited for the store's lock")
        time.sleep(0.5)  # the job at its key, waiting for the run
        os.killpg(process.pid, signal.SIGINT)
        time.sleep(1.0)
        assert process.poll() is None, "exited without waiting for the run it was opening"
        lock.release()
        _, stderr = process.communicate(timeout=120)
    finally:
        if lock.is_locked:
            lock.release()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if ERROR in line]
    assert len(lines) == 1 and "interrupted by SIGINT (Ctrl-C)" in lines[0], stderr
    assert "Traceback" not in stderr
    assert "recorded as KILLED: MLflow run " in stderr
    (killed,) = _runs(uri)
    assert killed.info.status == "KILLED"
    assert killed.data.tags["gemmlab.status"] == "killed"
    assert killed.data.tags["failure_reason"] == "interrupted by SIGINT (Ctrl-C)"
    assert "perf/gflops" not in killed.data.metrics
    assert killed.data.params["kernel.name"] == "matmul_1"  # gathered params go out with it
