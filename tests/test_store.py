"""The sqlite store's lock (runner/record/store.py): a folder that cannot be written fails at
once, only a lock that another process really holds is waited for, saying so, and a file that is
not a database is refused without a lock file left beside it."""

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_bad_inputs_cli import gemmlab, one_error_line

from runner.errors import RunError
from runner.record.store import check_scheme, ensure_store, store_lock

# A folder nobody can create files in, root included (the tests run as root here, so a
# chmod-ed folder would still be writable).
UNWRITABLE = "/proc/gemmlab-test.db"

HOLDER = """
import sys, time
from filelock import FileLock
with FileLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _hold(lock_path: Path, seconds: float) -> subprocess.Popen:
    """Another process that holds the lock for `seconds`, started once it holds it."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_path), str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_an_unwritable_folder_fails_at_once():
    started = time.monotonic()
    with pytest.raises(RunError, match=r"cannot write in /proc, the folder of the sqlite store"):
        with store_lock(Path(UNWRITABLE)):
            pass
    assert time.monotonic() - started < 1


def test_a_lock_held_by_another_process_is_waited_for_and_said(tmp_path, caplog):
    store = tmp_path / "mlflow.db"
    holder = _hold(Path(str(store) + ".lock"), 2)
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="runner.record.store"):
            with store_lock(store, timeout=60):
                waited = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    assert 0.5 < waited < 30, f"{waited:.1f} s: the lock was waited for until it was released"
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith(f"waiting for another gemmlab process that holds {store}.lock")


def test_a_lock_held_past_the_timeout_names_it(tmp_path, caplog):
    store = tmp_path / "mlflow.db"
    holder = _hold(Path(str(store) + ".lock"), 30)
    try:
        with pytest.raises(RunError, match=rf"another process has held {store}.lock for 1 s"):
            with store_lock(store, timeout=1):
                pass
    finally:
        holder.kill()
        holder.wait()


def test_a_free_lock_is_taken_without_a_message(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="runner.record.store"):
        with store_lock(tmp_path / "mlflow.db"):
            pass
    assert not caplog.records


def test_an_unwritable_store_folder_is_one_line_from_the_command_line(tmp_path):
    uri = f"sqlite:///{UNWRITABLE}"
    started = time.monotonic()
    done = gemmlab(tmp_path, f"tracking.uri={uri}", timeout=60)
    elapsed = time.monotonic() - started
    one_error_line(done, f"cannot record in MLflow at tracking.uri={uri}",
                   "cannot write in /proc, the folder of the sqlite store")
    assert elapsed < 15, f"{elapsed:.1f} s"


@pytest.mark.parametrize("kind", ["a text file", "a folder"])
def test_a_path_that_is_not_a_database_is_refused_and_left_alone(tmp_path, kind):
    target = tmp_path / "README.md"
    if kind == "a folder":
        target.mkdir()
    else:
        target.write_text("# gemmlab\n\nA README, not a database.\n")
    with pytest.raises(RunError, match="is a folder, not a database file" if kind == "a folder"
                       else "file is not a database"):
        ensure_store(f"sqlite:///{target}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]  # no README.md.lock
    if kind == "a text file":
        assert target.read_text().startswith("# gemmlab")


def test_sqlite_readme_from_the_command_line_leaves_no_lock_file(tmp_path):
    (tmp_path / "README.md").write_text("# my project\n")
    done = gemmlab(tmp_path, "tracking.uri=sqlite:///README.md", timeout=60)
    one_error_line(done, "cannot record in MLflow at tracking.uri=sqlite:///README.md",
                   "file is not a database")
    assert not (tmp_path / "README.md.lock").exists()


@pytest.mark.parametrize("uri, suggested", [("mlflow.db", "sqlite:///mlflow.db"),
                                            ("runs/sgemm.db", "sqlite:///runs/sgemm.db"),
                                            ("./runs", "sqlite:///mlflow.db")])
def test_a_uri_without_a_scheme_is_refused_with_the_sqlite_form(uri, suggested):
    with pytest.raises(RunError, match="no scheme") as refused:
        check_scheme(uri)
    assert f"tracking.uri={suggested}," in str(refused.value)


@pytest.mark.parametrize("uri", ["sqlite:///mlflow.db", "sqlite:////abs/x.db",
                                 "http://host:5000", "https://host", "file:///tmp/runs",
                                 "databricks"])
def test_a_uri_with_a_scheme_passes(uri):
    check_scheme(uri)


@pytest.mark.parametrize("sweep", [False, True])
def test_a_uri_without_a_scheme_is_one_line_and_writes_no_store(tmp_path, sweep):
    prefix = ("-m", "runner", "-m") if sweep else ("-m", "runner")
    done = gemmlab(tmp_path, "tracking.uri=mlflow.db", "size=32,48" if sweep else "size=32",
                   prefix=prefix, timeout=120)
    one_error_line(done, "cannot record in MLflow at tracking.uri=mlflow.db",
                   "tracking.uri=sqlite:///mlflow.db")
    assert "deprecat" not in done.stderr.replace("a store it has deprecated", "")
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def _experiments(path: Path) -> list:
    import sqlite3

    with sqlite3.connect(path) as database:
        return database.execute("SELECT name, artifact_location FROM experiments").fetchall()


def test_new_stores_are_copies_of_an_empty_template_mlflow_opens_as_its_own(tmp_path,
                                                                            monkeypatch):
    """The first new store leaves a template (its Default experiment taken out, as it names that
    store's folder); the next new store is a copy of it, given its Default experiment by MLflow
    as a store it creates, and records as one."""
    import sqlite3

    from mlflow.tracking import MlflowClient

    from runner.record.store import TEMPLATE_ENV

    template = tmp_path / "template.db"
    monkeypatch.setenv(TEMPLATE_ENV, str(template))
    monkeypatch.chdir(tmp_path)
    ensure_store(f"sqlite:///{tmp_path / 'first' / 'mlflow.db'}")
    assert template.is_file() and _experiments(template) == []
    with sqlite3.connect(template) as database:  # a mark only a copy of the template carries
        database.execute("CREATE TABLE gemmlab_mark (x INTEGER)")
    second = tmp_path / "second" / "mlflow.db"
    ensure_store(f"sqlite:///{second}")
    with sqlite3.connect(second) as database:
        assert database.execute("SELECT name FROM sqlite_master WHERE name = 'gemmlab_mark'"
                                ).fetchall(), "not made from the template"
    assert _experiments(second) == _experiments(tmp_path / "first" / "mlflow.db")
    client = MlflowClient(f"sqlite:///{second}")
    run = client.create_run(client.create_experiment("x"))
    client.log_metric(run.info.run_id, "m", 1.0)
    assert client.get_run(run.info.run_id).data.metrics == {"m": 1.0}


def test_a_template_mlflow_cannot_open_is_dropped_and_the_store_made_anew(tmp_path, monkeypatch):
    from runner.record.store import TEMPLATE_ENV

    template = tmp_path / "template.db"
    template.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)  # no database behind it
    monkeypatch.setenv(TEMPLATE_ENV, str(template))
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store" / "mlflow.db"
    ensure_store(f"sqlite:///{store}")
    assert [name for name, _ in _experiments(store)] == ["Default"]
    assert _experiments(template) == []  # made again from the store just created
    assert not list(store.parent.glob(".*creating*"))


def test_no_template_where_it_is_turned_off(tmp_path, monkeypatch):
    from runner.record.store import TEMPLATE_ENV, template_path

    monkeypatch.setenv(TEMPLATE_ENV, "off")
    assert template_path() is None
    ensure_store(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [name for name, _ in _experiments(tmp_path / "mlflow.db")] == ["Default"]
