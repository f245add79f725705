"""Ctrl-C and SIGTERM inside MLflow store calls (runner/terminal/interrupts.py, runner/record/
store.py): held back until the call returns, so that the run's KILLED end can be written.

A KeyboardInterrupt raised inside a sqlite store's query used to leave this very process a
closed connection that still held its lock on the file (SQLAlchemy invalidates the connection
on KeyboardInterrupt; sqlite3 closes it while the interrupted statement, kept by the
interrupt's traceback, is still open): every write of the KILLED end then waited MLflow's 20 s
busy timeout and failed with "database is locked". These tests interrupt the process at that
very moment, right after a SELECT of the store has executed and while its cursor is open."""

import os
import signal
import subprocess
import sys
import threading
import time

import mlflow
import pytest
from conftest import compose_config
from mlflow.tracking import MlflowClient
from sqlalchemy import event
from sqlalchemy.engine import Engine

from runner.record import names
from runner.record.store import ensure_store
from runner.record.tracking import Recorder
from runner.sweep.callback import ORPHAN_WITHOUT_PARAMS
from runner.terminal.interrupts import Terminated, describe, shielded

pytestmark = pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                                reason="signal handlers run in the main thread only")


def _deliver(signum: int = signal.SIGINT) -> None:
    os.kill(os.getpid(), signum)
    for _ in range(100):  # Python runs the handler at the next instruction of the main thread
        time.sleep(0.001)


@pytest.fixture
def sigint_in_next_select():
    """Append to the list it gives to arm it: the next SELECT the main thread runs on any
    SQLAlchemy engine sends SIGINT to this process right after executing, its cursor open."""
    armed: list = []

    def after_cursor_execute(conn, cursor, statement, *args):
        if armed and statement.lstrip().upper().startswith("SELECT") \
                and threading.current_thread() is threading.main_thread():
            armed.clear()
            os.kill(os.getpid(), signal.SIGINT)

    event.listen(Engine, "after_cursor_execute", after_cursor_execute)
    yield armed
    event.remove(Engine, "after_cursor_execute", after_cursor_execute)


def test_a_signal_inside_a_store_call_is_raised_after_it_and_the_run_still_ends_killed(
        tmp_path, sigint_in_next_select):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    recorder = Recorder(compose_config(f"tracking.uri={uri}").tracking, "interrupted")
    sigint_in_next_select.append(True)
    with pytest.raises(KeyboardInterrupt) as interrupted:  # keeps the traceback, as the
        recorder.params({"seed": 7})                       # runner's handler does
    assert not sigint_in_next_select, "the SELECT did not run"
    started = time.monotonic()
    recorder.finish(describe(interrupted.value), status="killed")
    assert time.monotonic() - started < 10  # not MLflow's 20 s busy timeout per write
    run = MlflowClient(uri).get_run(recorder.run_id)
    assert run.info.status == "KILLED"
    assert run.data.params["seed"] == "7"  # the interrupted call completed
    assert run.data.tags["gemmlab.status"] == "killed"
    assert run.data.tags["failure_reason"] == "interrupted by SIGINT (Ctrl-C)"


def test_a_signal_while_the_run_is_opened_ends_it_killed(tmp_path, sigint_in_next_select,
                                                         monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ensure_store(uri)
    start_run = mlflow.start_run

    def interrupted_start_run(*args, **kwargs):
        sigint_in_next_select.append(True)
        return start_run(*args, **kwargs)

    monkeypatch.setattr(mlflow, "start_run", interrupted_start_run)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        Recorder(compose_config(f"tracking.uri={uri}").tracking, "opened", params={"M": 16})
    assert time.monotonic() - started < 10
    assert not sigint_in_next_select, "the SELECT did not run"
    assert mlflow.active_run() is None
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("gemmlab").experiment_id])
    assert run.info.status == "KILLED"
    assert run.data.params == {"M": "16"}  # known before the run opened: recorded all the same
    assert run.data.tags["gemmlab.status"] == "killed"
    assert run.data.tags["failure_reason"] == "interrupted by SIGINT (Ctrl-C)"


def test_a_held_signal_is_raised_at_the_end_of_the_outermost_block():
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with shielded():
            with shielded():
                _deliver()
                reached.append("inner")
            reached.append("outer")  # the inner block's end raised nothing
    assert reached == ["inner", "outer"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_held_signal_is_raised_even_when_the_block_fails():
    """A store error must not swallow the Ctrl-C that came while the call waited."""
    with pytest.raises(Terminated) as raised:
        with shielded():
            _deliver(signal.SIGTERM)
            raise OSError("database is locked")
    assert isinstance(raised.value.__context__, OSError)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# ------------------------------------------------------------ Ctrl-C in a parallel sweep

def _sweep_children(client, experiment: str = "gemmlab") -> dict:
    """Each parent run of the experiment's sweeps (oldest first) -> its children."""
    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    parents = client.search_runs([experiment_id], "tags.`gemmlab.sweep` = 'true'",
                                 order_by=["attributes.start_time ASC"])
    return {parent.info.run_id: (parent, [run for run in client.search_runs(
        [experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
        if run.data.tags.get("gemmlab.series") != "true"])  # a chart's lines, not jobs
        for parent in parents}


def _as_from_a_terminal(command: list, cwd) -> subprocess.Popen:
    """A process group of its own with SIGINT at its default action, as a shell in a terminal
    starts a command (a process started with `&` from a script would ignore SIGINT)."""
    return subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def ctrl_c_once(command: list, cwd, ready) -> tuple[int, str, str]:
    """Run `command` as from a terminal and send its process group SIGINT once `ready()` says
    so (polled every 0.2 s; an exception while the store is being created counts as not yet);
    its exit status, stdout and stderr."""
    process = _as_from_a_terminal(command, cwd)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.2)
            try:
                if ready():
                    break
            except Exception:  # the experiment is being created
                continue
        assert process.poll() is None, process.communicate()[1][-3000:]
        os.killpg(process.pid, signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return process.returncode, stdout, stderr


def test_ctrl_c_in_a_joblib_sweep_leaves_no_run_running_and_the_resume_measures_them(tmp_path):
    """Issue 39: joblib's workers, killed by the launcher when the sweep is interrupted, left
    their runs RUNNING for good. Ctrl-C goes to the whole process group, as a terminal sends
    it, while both workers are in the middle of a job: each job times for 4 s at least
    (adaptive timing, whatever the OpenCL runtime's speed), and the signal is sent within 2 s
    of a job's start."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    command = [sys.executable, "-m", "runner", "-m", "backend.device_type=cpu", "timing.warmup=0",
               "timing.target_noise=1e-9", "timing.min_time_s=4", "timing.max_time_s=4",
               "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "kernel=matmul_1",
               "size=16,24,32", f"tracking.uri={store}",
               "reuse_unclean=true"]  # two jobs on a CPU share it: their runs are not clean
    ensure_store(store)  # polled below while the command runs
    client = MlflowClient(store)

    def a_job_just_started() -> bool:
        runs = [run for _, children in _sweep_children(client).values() for run in children]
        return any(run.info.status == "RUNNING" and time.time() * 1000 - run.info.start_time
                   < 2000 for run in runs)

    returncode, stdout, stderr = ctrl_c_once(command, tmp_path, a_job_just_started)
    assert returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "interrupted by SIGINT (Ctrl-C): " in stdout  # the summary says the sweep stopped
    ((parent, jobs),) = _sweep_children(client).values()
    assert parent.info.status == "KILLED"
    assert "RUNNING" not in [run.info.status for run in jobs]
    killed_runs = [run for run in jobs if run.info.status == "KILLED"]
    assert killed_runs, [(run.info.status, run.data.params.get("M")) for run in jobs]
    assert all(run.data.tags["gemmlab.status"] == "killed"
               and run.data.tags["failure_reason"] == "interrupted by SIGINT (Ctrl-C)"
               for run in killed_runs)
    # A worker that joblib killed (SIGKILL) between opening its run and writing its params
    # leaves a KILLED run that says so in its description; every other has its params.
    assert all("M" in run.data.params or run.data.tags.get(names.NOTE) == ORPHAN_WITHOUT_PARAMS
               for run in killed_runs)
    done_before = {run.data.params["M"] for run in jobs if run.info.status == "FINISHED"}
    killed = {"16", "24", "32"} - done_before  # what the resume has to measure
    assert {run.data.params["M"] for run in killed_runs if "M" in run.data.params} <= killed

    resumed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (_, again), = [value for key, value in _sweep_children(client).items()
                   if key != parent.info.run_id]
    statuses = {run.data.params["M"]: run.data.tags["gemmlab.status"] for run in again}
    assert {m for m, status in statuses.items() if status == "ok"} >= killed  # measured again
    assert {m for m, status in statuses.items() if status == "cached"} == done_before
    assert sorted(statuses) == ["16", "24", "32"]


# Ctrl-C as a joblib sweep ends: sent to the process group from inside loky's exit hook, where
# a KeyboardInterrupt used to print a traceback and leave exit status 0.
CTRL_C_AS_LOKY_EXITS = """
import os, runpy, signal, sys, time
import joblib.externals.loky.process_executor as executor
original = executor._python_exit
def interrupted_exit():
    os.killpg(0, signal.SIGINT)
    time.sleep(0.5)
    original()
executor._python_exit = interrupted_exit
sys.argv[0] = "gemmlab"
runpy.run_module("runner", run_name="__main__")
"""


def test_ctrl_c_as_a_joblib_sweep_ends_exits_130_without_a_traceback(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    process = _as_from_a_terminal(
        [sys.executable, "-c", CTRL_C_AS_LOKY_EXITS, "-m", "backend.device_type=cpu",
         "timing.repeats=3", "timing.warmup=0", "hydra/launcher=joblib",
         "hydra.launcher.n_jobs=2", "kernel=matmul_1", "size=16,24", f"tracking.uri={store}"],
        tmp_path)
    try:
        stdout, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-3000:]
    assert "gemmlab: error: interrupted by SIGINT (Ctrl-C) as the command was ending" in stderr
    assert "2/2 jobs: 2 measured" in stdout  # the sweep itself had ended, and is recorded
    ((parent, jobs),) = _sweep_children(MlflowClient(store)).values()
    assert parent.info.status == "FINISHED"
    assert sorted(run.info.status for run in jobs) == ["FINISHED", "FINISHED"]


def test_an_orphan_without_params_says_why_as_it_is_ended_killed(tmp_path):
    """A joblib worker killed (SIGKILL) after opening its run and before writing its params:
    the sweep's end marks it KILLED with the reason, and its description says why it has no
    params; an orphan with params gets no description."""
    from types import SimpleNamespace

    from runner.sweep.callback import SweepRecorder

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ensure_store(store)
    client = MlflowClient(store)
    experiment = client.create_experiment("orphans")
    bare = client.create_run(experiment, run_name="matmul_1 opencl 16³")
    with_params = client.create_run(experiment, run_name="matmul_1 opencl 24³")
    client.log_param(with_params.info.run_id, "M", "24")
    runs = [client.get_run(run.info.run_id) for run in (bare, with_params)]
    sweep = SimpleNamespace(_launcher="JoblibLauncher", _client=client)
    assert SweepRecorder._end_orphans(sweep, runs, "interrupted by SIGINT (Ctrl-C)")
    bare, with_params = (client.get_run(run.info.run_id) for run in runs)
    assert bare.info.status == with_params.info.status == "KILLED"
    assert bare.data.tags[names.NOTE] == ORPHAN_WITHOUT_PARAMS
    assert names.NOTE not in with_params.data.tags
    assert with_params.data.tags["failure_reason"] == "interrupted by SIGINT (Ctrl-C)"
