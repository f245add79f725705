"""The shared tracking server as a team uses it (issue 56, part 3), against real `mlflow server`
processes (tests/services.py), started in fixtures and stopped by PID: a server that refuses
this host (403) or these credentials (401) is one line and exit 1 before anything is recorded or
run; MLflow's basic authentication with credentials records; an outage mid-sweep loses no
measured job and leaves no run RUNNING; what a server could not take is kept in the spool and
written once, by the next command or `gemmlab sync`; `gemmlab ui --uri http://…` prints the
server's URLs and starts nothing. CPU jobs on the CPU's OpenCL device."""

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from services import MlflowServer, free_port

from runner.record import names

JOB = ["backend.device_type=cpu", "kernel=matmul_1", "size=16", "timing.repeats=3",
       "timing.warmup=1"]
# Eight small jobs: two kernels by four sizes.
SWEEP = ["-m", "backend.device_type=cpu", "kernel=matmul_1,matmul_2", "size=16,24,32,40",
         "timing.repeats=3", "timing.warmup=1"]
ERROR = "gemmlab: error: "

pytestmark = pytest.mark.skipif(MlflowServer.missing() is not None,
                                reason=MlflowServer.missing() or "")


def gemmlab(cwd: Path, *args: str, spool: Path, timeout: float = 240,
            **env_extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HYDRA_FULL_ERROR", "MLFLOW_TRACKING_USERNAME",
                        "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_URI")}
    env.update({"COLUMNS": "400", "GEMMLAB_SPOOL": str(spool), **env_extra})
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def only_line(done: subprocess.CompletedProcess, *expected: str) -> str:
    """The command's whole output is one `gemmlab: error:` line, exit 1."""
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 1, (done.stdout + done.stderr)[-3000:]
    assert len(lines) == 1 and lines[0].startswith(ERROR), lines[-20:]
    for words in expected:
        assert words in lines[0], lines[0]
    return lines[0]


def stored_runs(server: MlflowServer) -> int:
    """How many runs the server's own store holds (read from its sqlite file)."""
    database = server.folder / "mlflow.db"
    if not database.exists():
        return 0
    with sqlite3.connect(database) as connection:
        return connection.execute("select count(*) from runs").fetchone()[0]


def finished_children(server: MlflowServer) -> int:
    with sqlite3.connect(server.folder / "mlflow.db") as connection:
        return connection.execute(
            "select count(*) from runs r join tags t on t.run_uuid = r.run_uuid "
            "where t.key = 'mlflow.parentRunId' and r.status = 'FINISHED'").fetchone()[0]


def sweep_runs(uri: str, **credentials: str):
    """(parents, jobs, every run) of the server's gemmlab experiment."""
    previous = {key: os.environ.get(key) for key in credentials}
    os.environ.update(credentials)
    try:
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name("gemmlab")
        runs = client.search_runs([experiment.experiment_id], max_results=1000)
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    parents = [r for r in runs if r.data.tags.get(names.SWEEP) == "true"]
    jobs = [r for r in runs if names.PARENT_RUN_ID in r.data.tags
            and r.data.tags.get(names.SERIES) != "true"]
    return parents, jobs, runs


def kept(spool: Path) -> list[str]:
    return sorted(path.name.split(".", 1)[1] for path in spool.glob("*/*.json"))


@pytest.fixture
def server(tmp_path):
    running = MlflowServer(tmp_path / "server").start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    if MlflowServer.missing(auth=True):
        pytest.skip(MlflowServer.missing(auth=True))
    running = MlflowServer(tmp_path_factory.mktemp("auth"), auth=True).start()
    yield running
    running.stop()


def _loopback_alias(host: str = "127.0.0.2") -> bool:
    try:
        with socket.socket() as probe:
            probe.bind((host, 0))
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def other_host_server(tmp_path_factory):
    """A server bound to 127.0.0.2, as a cluster-visible server is bound to its host's address:
    MLflow 3.17 answers /health to any host, and 403 to API requests from names outside its
    --allowed-hosts (its default allows none of this one)."""
    if not _loopback_alias():
        pytest.skip("127.0.0.2 cannot be bound here (no loopback alias)")
    running = MlflowServer(tmp_path_factory.mktemp("other"), host="127.0.0.2").start()
    yield running
    running.stop()


@pytest.mark.parametrize("args", [JOB, SWEEP], ids=["single run", "sweep"])
def test_a_server_refusing_this_host_is_one_line_and_nothing_is_recorded_or_run(
        other_host_server, tmp_path, args):
    done = gemmlab(tmp_path, *args, f"tracking.uri={other_host_server.uri}",
                   spool=tmp_path / "spool")
    host = other_host_server.uri.removeprefix("http://")
    only_line(done, f"cannot record in MLflow at tracking.uri={other_host_server.uri}: ",
              "the server refused this host (403 Invalid Host header): start mlflow server "
              f"with --allowed-hosts {host} ")
    assert stored_runs(other_host_server) == 0
    assert not list(tmp_path.glob("multirun/*/*/*/.hydra")), "a job ran"


def test_the_recipe_with_allowed_hosts_records_from_another_host_name(tmp_path):
    """The docs' recipe: --allowed-hosts lists the host:port the clients use."""
    if not _loopback_alias():
        pytest.skip("127.0.0.2 cannot be bound here (no loopback alias)")
    port = free_port()
    recipe = MlflowServer(tmp_path / "server", host="127.0.0.2", port=port,
                          allowed_hosts=f"127.0.0.2:{port},localhost:{port}")
    recipe.start()
    try:
        done = gemmlab(tmp_path, *JOB, f"tracking.uri={recipe.uri}", spool=tmp_path / "spool")
        assert done.returncode == 0, done.stderr[-3000:]
        assert stored_runs(recipe) == 1
    finally:
        recipe.stop()


def test_basic_auth_without_credentials_is_one_line_and_with_them_records(auth_server,
                                                                           tmp_path):
    spool = tmp_path / "spool"
    done = gemmlab(tmp_path, *SWEEP[:3], "size=16,24", *SWEEP[4:],
                   f"tracking.uri={auth_server.uri}", spool=spool)
    only_line(done, "the server asks for a user and password (401 Unauthorized): set "
              "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD")
    done = gemmlab(tmp_path, *JOB, f"tracking.uri={auth_server.uri}", spool=spool,
                   MLFLOW_TRACKING_USERNAME=MlflowServer.ADMIN,
                   MLFLOW_TRACKING_PASSWORD="not-the-password")
    only_line(done, "the server refused the user 'admin' (401 Unauthorized")
    assert stored_runs(auth_server) == 0
    admin = {"MLFLOW_TRACKING_USERNAME": MlflowServer.ADMIN,
             "MLFLOW_TRACKING_PASSWORD": MlflowServer.ADMIN_PASSWORD}
    done = gemmlab(tmp_path, *SWEEP[:3], "size=16,24", *SWEEP[4:],
                   f"tracking.uri={auth_server.uri}", spool=spool, **admin)
    assert done.returncode == 0, done.stderr[-3000:]
    (parent,), jobs, _ = sweep_runs(auth_server.uri, **admin)
    assert parent.info.status == "FINISHED" and len(jobs) == 4
    assert {run.info.status for run in jobs} == {"FINISHED"}
    # `gemmlab ui --uri http://…`: that server's URLs, nothing started; credentials checked.
    started = time.monotonic()
    done = gemmlab(tmp_path, "ui", "--uri", auth_server.uri, spool=spool, timeout=60, **admin)
    assert done.returncode == 0, done.stderr[-3000:]
    assert time.monotonic() - started < 30
    out = done.stdout
    assert f"MLflow UI of the tracking server: {auth_server.uri}" in out
    assert f"{auth_server.uri}/#/experiments/{parent.info.experiment_id}/runs/" \
           f"{parent.info.run_id}" in out
    assert f"opened: {parent.info.run_name} ({parent.info.run_id[:8]}, 4 jobs)" in out
    assert "answering on" not in out  # no server of its own
    done = gemmlab(tmp_path, "ui", "--uri", auth_server.uri, spool=spool, timeout=60)
    only_line(done, f"cannot read MLflow at --uri {auth_server.uri}: the server asks for a "
              "user and password (401 Unauthorized)")


def _stop_after(server: MlflowServer, jobs: int, down_s: float, said: dict) -> threading.Thread:
    """A thread that stops the server once `jobs` jobs are recorded FINISHED, and starts it
    again on the same port and store `down_s` seconds later (never, for None)."""
    def outage():
        deadline = time.monotonic() + 120
        while finished_children(server) < jobs and time.monotonic() < deadline:
            time.sleep(0.2)
        server.stop()
        said["stopped"] = time.monotonic()
        if down_s is not None:
            time.sleep(down_s)
            server.start()
            said["answering"] = time.monotonic()
    thread = threading.Thread(target=outage, daemon=True)
    thread.start()
    return thread


def test_a_server_down_20_s_mid_sweep_loses_no_job_and_leaves_nothing_running(server,
                                                                               tmp_path):
    """Issue 56's done-when: the server killed in the middle of an 8-job sweep and started
    again 20 s later (MLflow's retries at gemmlab's defaults, the sweep's end waiting for it):
    after the command every job is recorded once, no run is RUNNING, the terminal says it in
    one line and never in retry warnings."""
    spool, said = tmp_path / "spool", {}
    outage = _stop_after(server, 2, 20.0, said)
    done = gemmlab(tmp_path, *SWEEP, f"tracking.uri={server.uri}", spool=spool)
    outage.join(timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "stopped" in said and "answering" in said
    (parent,), jobs, everything = sweep_runs(server.uri)
    assert sorted((run.data.params[names.KERNEL_NAME], run.data.params["M"])
                  for run in jobs) == sorted((kernel, size) for kernel in ("matmul_1", "matmul_2")
                                             for size in ("16", "24", "32", "40"))
    assert [run for run in everything if run.info.status == "RUNNING"] == []
    assert {run.data.tags[names.STATUS] for run in jobs} == {"ok"}
    assert parent.info.status == "FINISHED"
    assert parent.data.tags[f"{names.SWEEP_PREFIX}ok"] == "8"
    assert "Retrying" not in output and "urllib3" not in output
    notes = [line for line in done.stderr.splitlines()
             if "is not answering" in line]
    assert len(notes) == 1 and notes[0].startswith(f"gemmlab: the MLflow server at {server.uri}")
    assert kept(spool) == []
    assert "8/8 jobs: 8 measured" in done.stdout


def test_what_the_server_could_not_take_is_kept_and_written_once_by_the_next_command(
        server, tmp_path):
    """The server gone for the rest of the sweep: its jobs' records and the sweep's end are
    kept in the spool (one line, exit 1); the next gemmlab command on that tracking.uri writes
    them, and writing the same records again (`gemmlab sync` of a copy of the spool) adds no
    run."""
    spool, said = tmp_path / "spool", {}
    outage = _stop_after(server, 2, None, said)
    quick = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "GEMMLAB_SERVER_WAIT_S": "1"}
    done = gemmlab(tmp_path, *SWEEP, f"tracking.uri={server.uri}", spool=spool, **quick)
    outage.join(timeout=120)
    assert done.returncode == 1, (done.stdout + done.stderr)[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith(ERROR)]
    assert len(errors) == 1, done.stderr[-3000:]
    assert f"the MLflow server at {server.uri} did not answer by the sweep's end" in errors[0]
    assert "gemmlab sync" in errors[0]
    assert "Retrying" not in done.stdout + done.stderr
    records = kept(spool)
    assert records.count("sweep.json") == 1 and records.count("run.json") == 6, records
    copy = tmp_path / "copy"
    shutil.copytree(spool, copy)
    # A run's record holds what the job measured and its end.
    run_record = json.loads(next(spool.glob("*/*.run.json")).read_text())
    assert run_record["status"] == "FINISHED" and dict(run_record["metrics"])[names.GFLOPS] > 0

    server.start()
    done = gemmlab(tmp_path, *JOB, f"tracking.uri={server.uri}", spool=spool)  # the next one
    assert done.returncode == 0, done.stderr[-3000:]
    assert "gemmlab: wrote 6 runs and 1 sweep kept in" in done.stderr
    assert kept(spool) == []

    def state():
        parents, jobs, everything = sweep_runs(server.uri)
        return (len(parents), len(jobs), len(everything),
                sorted(run.info.status for run in everything))
    after_first = state()
    assert after_first[:2] == (1, 8)
    assert "RUNNING" not in after_first[3]
    (parent,), _, _ = sweep_runs(server.uri)
    assert parent.info.status == "FINISHED"
    assert parent.data.tags[f"{names.SWEEP_PREFIX}ok"] == "8"

    shutil.rmtree(spool)
    shutil.copytree(copy, spool)  # the same records, written a second time
    done = gemmlab(tmp_path, "sync", spool=spool)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "gemmlab: wrote 6 runs and 1 sweep kept in" in done.stderr
    assert state() == after_first
    done = gemmlab(tmp_path, "sync", "--uri", server.uri, spool=spool)
    assert done.returncode == 0 and "nothing kept" in done.stdout


def test_sync_says_in_one_line_that_a_server_still_does_not_answer(tmp_path):
    spool = tmp_path / "spool"
    uri = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    done = gemmlab(tmp_path, "sync", "--uri", uri, spool=spool)
    assert done.returncode == 0 and f"nothing kept for {uri}" in done.stdout
    from runner.record import spool as kept_records

    os.environ["GEMMLAB_SPOOL"] = str(spool)
    try:
        kept_records.keep(uri, kept_records.RUN, "0" * 32,
                          {"run_id": None, "experiment_id": "0", "run_name": "r",
                           "status": "FINISHED", "metrics": []})
    finally:
        os.environ.pop("GEMMLAB_SPOOL")
    done = gemmlab(tmp_path, "sync", spool=spool)
    only_line(done, f"the MLflow server at {uri} does not answer: 1 record(s) stay kept in")


def test_a_sweep_none_of_whose_jobs_could_be_recorded_exits_1(tmp_path, monkeypatch):
    """Every job failed "cannot record" (say, Slurm jobs on nodes without the credentials the
    submitting shell had): the sweep leaves no empty parent, says so in one line and exits 1,
    never 0 with nothing recorded. On a real sqlite store, the sweep's own end."""
    from runner.record.store import ensure_store
    from runner.record.tracking import experiment_for
    from runner.sweep import callback

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ensure_store(uri)
    client = MlflowClient(uri)
    experiment_id = experiment_for(uri, "gemmlab")
    parent = client.create_run(experiment_id, run_name="s", tags={names.SWEEP: "true"})
    monkeypatch.setattr(callback, "_exit_code", 0)
    sweep = callback.SweepRecorder()
    sweep._client, sweep._uri, sweep._experiment_id = client, uri, experiment_id
    sweep._name, sweep._expected, sweep._wall_s, sweep._launcher = "s", 2, 1.0, "BasicLauncher"
    sweep._write_end(parent.info.run_id, "FINISHED")
    assert callback.sweep_exit_code() == 1
    assert client.search_runs([experiment_id]) == []
