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
import threading
import time

import mlflow
import pytest
from conftest import compose_config
from mlflow.tracking import MlflowClient
from sqlalchemy import event
from sqlalchemy.engine import Engine

from runner.record.store import ensure_store
from runner.record.tracking import Recorder
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
        Recorder(compose_config(f"tracking.uri={uri}").tracking, "opened")
    assert time.monotonic() - started < 10
    assert not sigint_in_next_select, "the SELECT did not run"
    assert mlflow.active_run() is None
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("gemmlab").experiment_id])
    assert run.info.status == "KILLED"
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
