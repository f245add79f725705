"""Sweeps through the real command line: one MLflow parent run per multirun with its jobs as
children, counts with reasons, parallel jobs on a fresh store, resume, a real tracking server,
the Optuna preset and submitit's local executor. All on the CPU's OpenCL device."""

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest
from conftest import compose_config
from mlflow.tracking import MlflowClient

from runner.record import names
from runner.record.store import ensure_store
from runner.sweep.definition import expected_jobs, sweep_definition

QUICK = ["backend.device_type=cpu", "timing.repeats=3", "timing.warmup=0"]


def sweep(cwd: Path, *overrides: str, timeout: int = 600,
          columns: str = "200") -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "runner", "-m", *QUICK, *overrides], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": columns})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def parents(client: MlflowClient, experiment: str = "gemmlab") -> list:
    ids = [client.get_experiment_by_name(experiment).experiment_id]
    return client.search_runs(ids, "tags.`gemmlab.sweep` = 'true'",
                              order_by=["attributes.start_time ASC"])


def children(client: MlflowClient, parent) -> list:
    """The sweep's jobs (its series runs, lines of its chart, left out)."""
    return [run for run in client.search_runs(
        [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
        if run.data.tags.get("gemmlab.series") != "true"]


def series_runs(client: MlflowClient, parent) -> dict:
    """The sweep's series runs by their gemmlab.series.of tag."""
    return {run.data.tags["gemmlab.series.of"]: run for run in client.search_runs(
        [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}' "
        "and tags.`gemmlab.series` = 'true'")}


def statuses(runs) -> list[str]:
    return sorted(run.data.tags["gemmlab.status"] for run in runs)


def test_a_sweep_is_one_parent_with_its_children_and_counts(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = sweep(tmp_path, "kernel=matmul_2", "size=24,40", "kernel.params.TS=8,12",
                 f"tracking.uri={store}")
    client = MlflowClient(store)
    (parent,) = parents(client)
    jobs = children(client, parent)
    assert statuses(jobs) == ["ok", "ok", "refused", "refused"]
    assert all(run.info.status == "FINISHED" for run in jobs
               if run.data.tags["gemmlab.status"] == "ok")
    assert all("not an allowed value" in run.data.tags["failure_reason"] for run in jobs
               if run.data.tags["gemmlab.status"] == "refused")
    assert parent.info.status == "FINISHED"
    assert parent.data.params["sweep.size"] == "24,40"
    assert parent.data.params["sweep.kernel.params.TS"] == "8,12"
    assert parent.data.params["sweep.expected_jobs"] == "4"
    tags = parent.data.tags
    assert tuple(tags[f"gemmlab.sweep.{key}"] for key in ("ok", "refused", "failed", "cached",
                                                          "jobs")) == ("2", "2", "0", "0", "4")
    assert float(tags["gemmlab.sweep.overhead_s_per_job"]) < float(tags["gemmlab.sweep.wall_s"])
    # The chart is the series runs': the parent logs no metric of its own.
    assert parent.data.metrics == {}
    lines = series_runs(client, parent)
    # The library's line is there unless every baseline stayed noisy (a busy host: no %).
    with_pct = any("perf/pct_of_reference" in run.data.metrics for run in jobs)
    assert set(lines) == {"kernel matmul_2 on opencl"} | (
        {"numpy SGEMM on opencl"} if with_pct else set())
    history = client.get_metric_history(lines["kernel matmul_2 on opencl"].info.run_id,
                                        "series/gflops")
    best = {run.data.params["M"]: run.data.metrics["perf/gflops"] for run in jobs
            if run.data.tags["gemmlab.status"] == "ok"}
    assert {point.step: point.value for point in history} == {24: best["24"], 40: best["40"]}
    assert parent.info.run_name == "matmul_2 size=24,40 TS=8,12 · opencl sweep"
    note = parent.data.tags["mlflow.note.content"]
    assert note.startswith("**Best rate per size**")
    assert "| size | matmul_2 |" in note and "| 24³ | **★ " in note
    assert "numpy SGEMM)" in note or not with_pct  # no % against a disturbed baseline
    about = next(line for line in note.splitlines() if line.startswith("**matmul_2 size="))
    assert "4 jobs" in about
    assert "report/" in note and "`series/gflops`" in note
    assert parent.data.tags["device.name"] and parent.data.tags["gemmlab.runner_version"]
    assert "TS=8" in parent.data.tags["gemmlab.sweep.best"]
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"sweep_summary.csv", "sweep_summary.json", "failures.md", "report"} <= artifacts
    reports = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert "report/sweep.md" in reports and "report/sweep-rate.png" in reports
    failures = client.download_artifacts(parent.info.run_id, "failures.md", str(tmp_path))
    assert "2 × refused: matmul_2: TS=12 is not an allowed value" in Path(failures).read_text()
    assert "best configuration per kernel and size" in done.stdout
    assert "4/4 jobs: 2 measured, 0 cached (measured before), 2 refused" in done.stdout


def test_a_cpu_sweep_of_two_kernels_over_three_sizes_leaves_a_line_per_kernel(tmp_path):
    """Issue 40's acceptance: one series run per kernel under the parent, its rate a history
    over the sizes under one shared key; the jobs named kernel and size first; readers take the
    series runs for no job."""
    from runner.results.runs import load_runs

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep(tmp_path, "kernel=matmul_1,matmul_2", "size=16,24,32", f"tracking.uri={store}")
    client = MlflowClient(store)
    (parent,) = parents(client)
    lines = series_runs(client, parent)
    kernels = {of: run for of, run in lines.items() if of.startswith("kernel ")}
    assert set(kernels) == {"kernel matmul_1 on opencl", "kernel matmul_2 on opencl"}
    for run in lines.values():
        assert set(run.data.metrics) == {"series/gflops"}, "one shared key: one chart"
        history = client.get_metric_history(run.info.run_id, "series/gflops")
        assert sorted(point.step for point in history) == [16, 24, 32]
        assert run.data.tags["gemmlab.status"] == "series" and run.info.status == "FINISHED"
        assert "x (MLflow's *Step*) is the size" in run.data.tags["mlflow.note.content"]
    jobs = children(client, parent)
    assert len(jobs) == 6 and parent.data.tags["gemmlab.sweep.jobs"] == "6"
    assert sorted(run.info.run_name.split(" · ")[0] for run in jobs) == [
        f"matmul_{k} {n}³" for k in (1, 2) for n in (16, 24, 32)]
    assert {run.info.run_id for run in load_runs(store, None, parent.info.run_id)} == \
        {run.info.run_id for run in jobs}


def test_the_sweep_summary_keeps_its_tiling_column_in_a_narrow_pipe(tmp_path):
    """Piped with 80 columns, the best-configuration table is as wide as it needs: the row
    names the kernel and its whole tiling (rich used to squeeze the tiling column to nothing)."""
    done = sweep(tmp_path, "kernel=matmul_3", "size=32", "kernel.params.WPT=2,4",
                 f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", columns="80")
    rows = [line for line in done.stdout.splitlines() if line.startswith("│")]  # the table's
    assert len(rows) == 1 and "matmul_3" in rows[0], done.stdout[-2000:]
    assert "TS=" in rows[0] and "WPT=" in rows[0], done.stdout[-2000:]


def test_the_compare_view_gets_knobs_not_the_spec(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep(tmp_path, "kernel=matmul_3", "size=32", f"tracking.uri={store}")
    client = MlflowClient(store)
    (job,) = children(client, parents(client)[0])
    params = job.data.params
    assert not [key for key in params if key.startswith(("kernel.allowed", "kernel.constraints",
                                                         "kernel.launches", "kernel.summary"))]
    assert {"kernel.params.TS", "kernel.params.WPT", "kernel.spec_hash", "M", "N", "K",
            "seed", "timing.repeats", "backend.name", "kernel.name"} <= set(params)
    assert len(params) <= 20, sorted(params)
    spec = client.download_artifacts(job.info.run_id, "kernel_spec.yaml", str(tmp_path))
    assert "constraints:" in Path(spec).read_text()


def test_eight_parallel_joblib_jobs_on_a_fresh_store_lose_nothing(tmp_path):
    database = tmp_path / "fresh" / "mlflow.db"
    store = f"sqlite:///{database}"
    sizes = [str(n) for n in range(16, 24)]
    sweep(tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=8", "kernel=matmul_1",
          f"size={','.join(sizes)}", f"tracking.uri={store}")
    client = MlflowClient(store)
    (parent,) = parents(client)
    jobs = children(client, parent)
    assert sorted(run.data.params["M"] for run in jobs) == sizes, "one run per job, none lost"
    assert all(run.info.status == "FINISHED" and run.data.metrics["perf/gflops"] > 0
               for run in jobs)
    assert parent.data.tags["gemmlab.sweep.ok"] == "8"
    with sqlite3.connect(database) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_relaunched_sweep_skips_what_was_measured_and_reruns_on_request(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # reuse_unclean=true: this host may be busy (other tests), and its runs then not clean.
    points = ["kernel=matmul_2", "size=24,28", f"tracking.uri={store}", "reuse_unclean=true"]
    sweep(tmp_path, *points)
    again = sweep(tmp_path, *points)
    rerun = sweep(tmp_path, *points, "+rerun=true")
    client = MlflowClient(store)
    first, second, third = parents(client)
    measured = {run.info.run_id for run in children(client, first)}
    cached = children(client, second)
    assert statuses(cached) == ["cached", "cached"]
    assert {run.data.tags["gemmlab.reused_from"] for run in cached} == measured
    assert all(run.data.metrics["perf/gflops"] > 0 for run in cached)
    assert second.data.tags["gemmlab.sweep.cached"] == "2"
    assert "2/2 jobs: 0 measured, 2 cached" in again.stdout and "cached: measured in run" in \
        again.stdout
    assert statuses(children(client, third)) == ["ok", "ok"]
    assert "2/2 jobs: 2 measured" in rerun.stdout


def test_an_interrupted_sweep_resumes_where_it_stopped(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sizes = "size=256,264,272,280,288,296"  # over a second a job, so the signal lands mid-sweep
    command = [sys.executable, "-m", "runner", "-m", *QUICK, "kernel=matmul_1", sizes,
               "timing.repeats=200", f"tracking.uri={store}",
               "reuse_unclean=true"]  # resumed whatever the load of this host meanwhile
    # The test polls the store while the command runs: create it first, as the command does
    # under its lock, or this unlocked reader races the command's schema migration.
    ensure_store(store)
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    client = MlflowClient(store)
    deadline = time.monotonic() + 300
    finished = []
    while not finished and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
        try:
            finished = [run for parent in parents(client) for run in children(client, parent)
                        if run.info.status == "FINISHED"]
        except Exception:  # the store is being created
            continue
    assert finished and process.poll() is None, \
        f"the sweep should still be running: {process.poll()} {process.communicate()[1][-2000:]}"
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=120)
    (interrupted,) = parents(client)
    assert interrupted.info.status == "KILLED"
    done_before = {run.data.params["M"] for run in children(client, interrupted)
                   if run.info.status == "FINISHED"}
    assert 1 <= len(done_before) < 6

    resumed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    second = parents(client)[1]
    jobs = children(client, second)
    cached = {run.data.params["M"] for run in jobs if run.data.tags["gemmlab.status"] == "cached"}
    measured = {run.data.params["M"] for run in jobs if run.data.tags["gemmlab.status"] == "ok"}
    assert cached == done_before
    assert cached | measured == {"256", "264", "272", "280", "288", "296"}


# `python -c` that runs `python -m runner …` with SIGINT sent to the process inside a store
# call of the second job: right after a SELECT has executed, its cursor open, in the second
# call of OWNER.NAME (mlflow.start_run: the job's run being opened; mlflow.log_params: its
# params being written, as the Recorder opens it).
INTERRUPTED_INSIDE_A_STORE_CALL = """
import os, runpy, signal, sys, threading
import mlflow
from sqlalchemy import event
from sqlalchemy.engine import Engine
from runner.record.tracking import Recorder

armed, calls = [], []
def after_cursor_execute(conn, cursor, statement, *args):
    if armed and statement.lstrip().upper().startswith("SELECT") \\
            and threading.current_thread() is threading.main_thread():
        armed.clear()
        os.kill(os.getpid(), signal.SIGINT)
event.listen(Engine, "after_cursor_execute", after_cursor_execute)
owner = {"mlflow": mlflow, "Recorder": Recorder}[OWNER]
original = getattr(owner, NAME)
def arming(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
        armed.append(True)
    return original(*args, **kwargs)
setattr(owner, NAME, arming)
sys.argv[0] = "gemmlab"
runpy.run_module("runner", run_name="__main__")
"""


@pytest.mark.parametrize("owner, name", [("mlflow", "start_run"), ("mlflow", "log_params")])
def test_a_sweep_interrupted_inside_a_store_call_exits_at_once_with_its_runs_killed(
        tmp_path, owner, name):
    """The flake of test_an_interrupted_sweep_resumes_where_it_stopped made deterministic: the
    SIGINT lands while the sweep's process is inside a sqlite store call. That used to leave the
    process holding a lock on the store: "database is locked" after 20 s at every write of the
    KILLED end, a failed job instead of an interrupt, and the sweep going on to its next jobs
    (minutes, the parent left RUNNING)."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = f"OWNER, NAME = {owner!r}, {name!r}\n" + INTERRUPTED_INSIDE_A_STORE_CALL
    process = subprocess.Popen(
        [sys.executable, "-c", code, "-m", *QUICK, "kernel=matmul_1", "size=16,24,32",
         f"tracking.uri={store}"], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr[-3000:]
    assert "database is locked" not in stderr
    assert "gemmlab: error: interrupted by SIGINT (Ctrl-C)" in stderr
    client = MlflowClient(store)
    (parent,) = parents(client)
    assert parent.info.status == "KILLED"
    jobs = children(client, parent)
    assert sorted(run.info.status for run in jobs) == ["FINISHED", "KILLED"]
    (killed,) = [run for run in jobs if run.info.status == "KILLED"]
    assert killed.data.tags["failure_reason"] == "interrupted by SIGINT (Ctrl-C)"
    # known before the run opened, and written by the interrupted call or with the KILLED end
    assert killed.data.params["M"] == "24"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_sweep_records_into_a_real_mlflow_server(tmp_path):
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
         "--artifacts-destination", str(tmp_path / "server-artifacts")],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, "mlflow server exited"
                time.sleep(0.5)
        sweep(tmp_path / "..", "kernel=matmul_1", "size=20,21", f"tracking.uri={uri}")
        client = MlflowClient(uri)
        (parent,) = parents(client)
        jobs = children(client, parent)
        assert statuses(jobs) == ["ok", "ok"]
        artifacts = {a.path for a in client.list_artifacts(jobs[0].info.run_id)}
        assert {"config.yaml", "kernel_spec.yaml", "compile_log.txt"} <= artifacts
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_the_optuna_preset_draws_only_points_the_spec_accepts(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # TS=4 is fixed, so only WPT in 1, 2, 4 divides TS: three points, each measured once, then
    # drawn again (reused, cached); 8, 16 and 32 are never drawn.
    done = sweep(tmp_path, "+search=matmul_3", "kernel.params.TS=4", "size=32",
                 "hydra.sweeper.n_trials=6", f"tracking.uri={store}",
                 "reuse_unclean=true")  # reused whatever the load of this host
    client = MlflowClient(store)
    (parent,) = parents(client, "matmul_3_tuning")
    jobs = children(client, parent)
    assert len(jobs) == 6
    assert sorted(statuses(jobs)) == ["cached"] * 3 + ["ok"] * 3
    assert {job.data.params["kernel.params.WPT"] for job in jobs} == {"1", "2", "4"}
    assert parent.data.tags["gemmlab.sweep.sweeper"] == "OptunaSweeper"
    assert parent.data.params["sweep.expected_jobs"] == "6"
    output = done.stdout + done.stderr
    assert "3 of 6 points pass matmul_3's spec at 32x32x32" in output
    assert "Best value" in output


def test_a_search_over_a_step_with_size_rules_composes_and_runs(tmp_path):
    # matmul_9's size rules hold unset register caps (???): the sampler is handed the kernel as a
    # config, never built from it; the searched parameters pin the tile, so no rule applies.
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = sweep(tmp_path, "+search=matmul_9", "size=40", "hydra.sweeper.n_trials=2",
                 "timing.repeats=3", f"tracking.uri={store}")
    assert "90 of 324 points pass matmul_9's spec at 40x40x40" in done.stdout + done.stderr
    client = MlflowClient(store)
    (parent,) = parents(client, "matmul_9_tuning")
    assert statuses(children(client, parent)) == ["ok", "ok"]


def test_submitit_local_executor_runs_the_jobs(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep(tmp_path, "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10",
          "kernel=matmul_1", "size=18,19", f"tracking.uri={store}")
    client = MlflowClient(store)
    (parent,) = parents(client)
    assert parent.data.tags["gemmlab.sweep.launcher"] == "LocalLauncher"
    assert statuses(children(client, parent)) == ["ok", "ok"]


def test_presets_compose():
    slurm = compose_config("hydra/launcher=slurm", with_hydra=True)
    assert slurm.hydra.launcher._target_.endswith("SlurmLauncher")
    assert slurm.hydra.launcher.gpus_per_node == 1
    pool = compose_config("hydra/launcher=gpus", "gpus=2", with_hydra=True)
    assert pool.hydra.launcher._target_.endswith("JoblibLauncher")
    assert pool.hydra.launcher.n_jobs == 2


def test_the_sweep_definition_and_its_size_are_read_from_the_config():
    cfg = compose_config("+experiment=sgemm_ladder", with_hydra=True)
    cfg.hydra.overrides.task = ["seed=1,2", "shape=square_1024"]  # one shape: the ladder's go
    definition = sweep_definition(cfg)
    assert definition["kernel"].startswith("matmul_1,") and definition["seed"] == "1,2"
    assert "shape" not in definition
    assert expected_jobs(cfg) == 14 * 2  # matmul_1 .. matmul_14, two seeds


@pytest.mark.parametrize("task, overrides, starts", [
    (["kernel=matmul_9,matmul_13", "size=1024"], (), True),
    (["kernel=matmul_9", "size=1024"], (), False),  # one job: its worker compiles it
    ([], ("+search=matmul_9",), True),  # 16 trials asked at a time
    ([], ("+search=matmul_9", "hydra.sweeper.n_jobs=1"), False),  # each batch its first only
])
def test_the_compile_pool_starts_with_a_sweep_only_where_a_batch_can_use_it(task, overrides,
                                                                            starts):
    from runner.sweep.definition import compiles_ahead

    cfg = compose_config("backend=cuda", *overrides, with_hydra=True)
    cfg.hydra.overrides.task = task
    assert compiles_ahead(cfg) is starts


@pytest.mark.parametrize("search, grid", [("matmul_9", "matmul_9_grid")])
def test_the_search_space_matches_its_grid_and_the_allowed_values(search, grid):
    from conftest import kernel_yaml

    searched = compose_config(f"+search={search}", with_hydra=True).hydra.sweeper.params
    gridded = compose_config(f"+experiment={grid}", with_hydra=True).hydra.sweeper.params
    allowed = kernel_yaml(search)["allowed"]
    for key, choice in searched.items():
        values = [int(v) for v in choice.removeprefix("choice(").rstrip(")").split(",")]
        assert values == [int(v) for v in str(gridded[key]).split(",")], key
        assert set(values) <= set(allowed[key.rsplit(".", 1)[-1]]), key
    assert set(searched) == set(gridded)


def test_the_tuning_page_compares_the_search_with_the_grid(tmp_path):
    from runner.results.tuning import main as tuning_main

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    space = ["kernel.params.TS=8,16", "kernel.params.WPT=1,2,4"]
    sweep(tmp_path, "kernel=matmul_3", "size=48", *space, "tracking.experiment=tuning",
          f"tracking.uri={store}")
    sweep(tmp_path, "+search=matmul_3", "size=48", "hydra.sweeper.n_trials=4",
          "tracking.experiment=tuning", f"tracking.uri={store}")
    page, image = tuning_main(["--experiment", "tuning", "--uri", store,
                               "--out", str(tmp_path / "pages")])
    text = page.read_text()
    assert "grid: parent run" in text and "6 points (6 measured, 0 refused" in text
    assert "search: parent run" in text and "4 trials" in text
    assert ("reached the grid's best (or better) at trial" in text
            or "did not reach the grid's best in 4 trials" in text)
    assert image.stat().st_size > 10_000
    client = MlflowClient(store)
    grid = next(p for p in parents(client, "tuning")
                if p.data.tags["gemmlab.sweep.sweeper"] == "BasicSweeper")
    fastest = max(children(client, grid), key=lambda r: r.data.metrics["perf/gflops"])
    tiling = " ".join(f"{k}={fastest.data.params[f'kernel.params.{k}']}" for k in ("TS", "WPT"))
    assert f"| grid's best | {tiling} |" in text, "the fastest point, not the newest"


def _job(kernel: str, m: int, n: int, k: int, rate: float, backend: str = "opencl",
         operation: str = "sgemm", precision: str = "fp32", metrics: Optional[dict] = None,
         tags: Optional[dict] = None, tiling: Optional[dict] = None, start: int = 1):
    """A recorded job as MLflow returns it, without a store."""
    from mlflow.entities import Metric, Param, Run, RunData, RunInfo, RunTag

    metric = "perf/gflops" if operation == "sgemm" else "bw/gbps"
    info = RunInfo(run_id=f"{kernel}{backend}{m}{n}{k}{rate}", experiment_id="1",
                   user_id="", status="FINISHED", start_time=start, end_time=start + 1,
                   lifecycle_stage="active")
    params = {"kernel.name": kernel, "backend.name": backend, "M": m, "N": n, "K": k,
              "kernel.precision": precision,
              **{f"kernel.params.{name}": v for name, v in (tiling or {}).items()}}
    tags = {"gemmlab.status": "ok", "gemmlab.operation": operation, "device.name": "CPU",
            **(tags or {})}
    metrics = {metric: rate, **(metrics or {})}
    return Run(info, RunData(metrics=[Metric(key, v, 0, 0) for key, v in metrics.items()],
                             params=[Param(key, str(v)) for key, v in params.items()],
                             tags=[RunTag(key, v) for key, v in tags.items()]))


def _points(line) -> dict:
    return {(m.key, m.step): m.value for m in line.metrics(0)}


def test_the_series_are_the_best_rate_per_kernel_under_one_key_with_the_size_as_step():
    from runner.sweep.series import sweep_series
    from runner.sweep.summary import SweepSummary, description

    jobs = [_job("matmul_1", 64, 64, 64, 1.0), _job("matmul_1", 64, 64, 64, 3.0),
            _job("matmul_1", 128, 128, 128, 2.0), _job("matmul_2", 64, 64, 64, 5.0),
            _job("copy_1", 256, 256, 1, 40.0, operation="copy")]
    summary = SweepSummary.of(jobs)
    lines = {line.of: line for line in sweep_series(summary)}
    assert {of: _points(line) for of, line in lines.items()} == {
        "kernel copy_1 on opencl": {("series/gbps", 256): 40.0},
        "kernel matmul_1 on opencl": {("series/gflops", 64): 3.0, ("series/gflops", 128): 2.0},
        "kernel matmul_2 on opencl": {("series/gflops", 64): 5.0}}
    assert lines["kernel matmul_1 on opencl"].name == "matmul_1 · opencl · rate by size"
    text = description("sweep x: kernel=matmul_1,matmul_2", summary, 5, ["CPU"])
    about = next(line for line in text.splitlines() if line.startswith("**sweep x"))
    assert about.startswith("**sweep x: kernel=matmul_1,matmul_2**: 5 jobs on CPU")
    assert "`series/gbps`, `series/gflops`" in text and "not_square" not in text
    assert "Best configuration per kernel and size:" in text


def test_odd_shapes_and_each_backend_get_series_of_their_own_and_the_vendor_a_line():
    from runner.sweep.series import series_description, sweep_series
    from runner.sweep.summary import SweepSummary

    vendor = {"tags": {"vendor.name": "numpy SGEMM (host BLAS)"}}
    jobs = [_job("matmul_2", 64, 64, 64, 1.0, metrics={"vendor/gflops": 4.0,
                                                       "perf/pct_of_vendor": 25.0}, **vendor),
            _job("matmul_1", 64, 64, 64, 2.0, metrics={"vendor/gflops": 6.0,
                                                       "perf/pct_of_vendor": 33.0}, **vendor),
            _job("matmul_1", 64, 64, 64, 2.5, metrics={"vendor/gflops": 5.0,
                                                       "perf/pct_of_vendor": 50.0}, **vendor),
            _job("matmul_2", 64, 64, 64, 9.0, "cuda"),
            _job("matmul_2", 33, 17, 9, 0.5)]
    lines = {line.of: line for line in sweep_series(SweepSummary.of(jobs))}
    # Square sizes on the line, the other shape under a key of its own: no line joins them.
    assert _points(lines["kernel matmul_2 on opencl"]) == {
        ("series/gflops", 64): 1.0, ("series/gflops_not_square", 17): 0.5}
    assert _points(lines["kernel matmul_2 on cuda"]) == {("series/gflops", 64): 9.0}
    # The library's line: its median over the jobs that measured it, under the same key.
    library = lines["numpy SGEMM on opencl"]
    assert _points(library) == {("series/gflops", 64): 5.0}
    assert library.tags == {"gemmlab.backend": "opencl", "perf.reference": "numpy SGEMM"}
    assert lines["kernel matmul_2 on cuda"].tags == {"gemmlab.kernel": "matmul_2",
                                                     "gemmlab.backend": "cuda"}
    said = series_description(lines["kernel matmul_2 on opencl"], "s")
    assert "x (MLflow's *Step*) is the size, M = N = K" in said and "33x17x9 at 17" in said


def test_the_description_leads_with_size_by_kernel_the_winner_and_the_right_reference():
    """The H100 case: a TF32 step against cuBLAS TF32 (not 770% of cuBLAS SGEMM), a 3xTF32
    step against cuBLAS SGEMM, from records made before perf.reference existed; the fastest at
    each size starred; a job whose GPU was held back listed with its clock."""
    from runner.sweep.summary import SweepSummary, description

    old = {"vendor.name": "cuBLAS SGEMM (CuPy, TF32 off)",
           "vendor_tf32.name": "cuBLAS TF32 (CuPy, CUBLAS_COMPUTE_32F_FAST_TF32)",
           "gpu.hygiene": "clean", "gpu.clock_reasons": "none"}
    jobs = [_job("matmul_13", 4096, 4096, 4096, 397_645.0, "cuda", precision="tf32",
                 metrics={"perf/pct_of_vendor": 770.0, "perf/pct_of_vendor_tf32": 98.3},
                 tags=old),
            _job("matmul_12", 4096, 4096, 4096, 92_000.0, "cuda", precision="tf32x3",
                 metrics={"perf/pct_of_vendor": 177.0, "perf/pct_of_vendor_tf32": 23.0},
                 tags=old),
            _job("matmul_12", 8192, 8192, 8192, 93_000.0, "cuda", precision="tf32x3",
                 metrics={"perf/pct_of_vendor": 182.0, "gpu/sm_clock_mhz": 1890.0},
                 tags={**old, "gpu.clock_reasons": "sw_power_cap"})]
    text = description("sgemm", SweepSummary.of(jobs), 3, ["H100"])
    lines = text.splitlines()
    assert lines[0].startswith("**Best rate per size** (GFLOPS)")
    assert lines[2] == "| size | matmul_12 | matmul_13 |"
    assert lines[4] == ("| 4096³ | 92,000 (177% cuBLAS SGEMM) | "
                        "**★ 397,645 (98% cuBLAS TF32)** |")
    assert lines[5] == "| 8192³ | **★ 93,000 (182% cuBLAS SGEMM) †** | — |"
    assert "- matmul_12 8192³: clocks: sw_power_cap, SM clock 1,890 MHz" in text
    assert "770" not in text
    assert "| 397,645.0 GFLOPS | 98.3% cuBLAS TF32 |" in text


def test_a_job_whose_samples_are_noisy_is_marked_where_its_rate_is_shown():
    """Samples from 62 µs to 5 ms (a profiler holding the host back) gave a median that looked
    like any other rate: its noise is said beside the † list, as a baseline's would be."""
    from runner.sweep.summary import SweepSummary, description

    clean = {"gpu.hygiene": "clean", "gpu.clock_reasons": "none"}
    jobs = [_job("matmul_9", 1000, 1030, 999, 12_300.0, "cuda", tags=clean,
                 metrics={"perf/pct_of_vendor": 37.0, "time/noise": 2.09}),
            _job("matmul_9", 4096, 4096, 4096, 51_300.0, "cuda", tags=clean,
                 metrics={"perf/pct_of_vendor": 99.6, "time/noise": 0.004})]
    text = description("sgemm", SweepSummary.of(jobs), 2, ["H100"])
    assert "| 1000x1030x999 | **★ 12,300 †** |" in text
    assert "| 4096³ | **★ 51,300** |" in text
    assert "- matmul_9 1000x1030x999: samples noisy: median ±209.0%" in text
    assert "4096³: samples noisy" not in text


@pytest.mark.parametrize("overrides, said", [
    (["kernel=matmul_1,matmul_99", "size=16"], "Could not find 'kernel/matmul_99'"),
    (["+experiment=sgemm_ladder", "shape=null", "size=96"], "set to null"),
])
def test_a_sweep_that_starts_no_job_is_one_line_and_records_nothing(tmp_path, overrides, said):
    database = tmp_path / "mlflow.db"
    done = subprocess.run([sys.executable, "-m", "runner", "-m", *QUICK, *overrides,
                           f"tracking.uri=sqlite:///{database}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gemmlab: error: ") and said in lines[0], \
        lines[-20:]
    if database.exists():
        with sqlite3.connect(database) as connection:
            assert connection.execute("select count(*) from runs").fetchone() == (0,)


def _hydras_own_count(cfg) -> int:
    """The number of jobs Hydra's BasicSweeper makes of this config and command line."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    texts = [f"{k}={v}" for k, v in cfg.hydra.sweeper.params.items()]
    texts += list(cfg.hydra.overrides.task)
    (batch,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(texts), None)
    return len(batch)


@pytest.mark.parametrize("task", [
    ["+experiment=sgemm_ladder", "~shape", "size=96"],     # ~shape keeps the shape list
    ["+experiment=sgemm_ladder", "shape=square_1024"],     # a fixed value replaces it
    ["+experiment=sgemm_ladder", "shape=square_1024,square_2048", "seed=1,2"],
    ["+experiment=sgemm_ladder_cpu", "size=96"],
    ["+experiment=sgemm_ladder_cpu", "size=64,96", "kernel=matmul_1,matmul_2"],
    ["+experiment=transpose_ladder_cpu"],
])
def test_the_expected_job_count_is_what_hydra_launches(task):
    preset = next(t for t in task if t.startswith("+experiment="))
    cfg = compose_config(preset, *[t for t in task if t != preset and "," not in t
                                   and not t.startswith("~")], with_hydra=True)
    cfg.hydra.overrides.task = task
    assert expected_jobs(cfg) == _hydras_own_count(cfg)
    if "~shape" in task:  # what the sweep's parent records as swept: the shapes too
        assert expected_jobs(cfg) == 14 * 6 and "shape" in sweep_definition(cfg)  # 14 steps, 6 shapes


@pytest.mark.parametrize("preset", ["sgemm_ladder_cpu", "transpose_ladder_cpu"])
def test_the_cpu_presets_sweep_portable_steps_at_small_sizes_on_the_cpu(preset):
    from conftest import PORTABLE_KERNELS

    cfg = compose_config(f"+experiment={preset}", with_hydra=True)
    kernels = str(cfg.hydra.sweeper.params.kernel).split(",")
    assert kernels and set(kernels) <= set(PORTABLE_KERNELS)
    assert max(int(s) for s in str(cfg.hydra.sweeper.params.size).split(",")) <= 2048
    assert cfg.backend.device_type.value == "cpu" and cfg.timing.repeats <= 10
    assert cfg.tracking.experiment == preset


def test_a_cpu_ladder_with_a_size_counts_its_jobs_and_heads_the_cached_column(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    points = ["+experiment=transpose_ladder_cpu", "kernel=copy_1,transpose_1", "size=32",
              f"tracking.uri={store}", "reuse_unclean=true"]  # whatever the load of this host
    first = sweep(tmp_path, *points)
    assert "2/2 jobs: 2 measured" in first.stdout
    again = sweep(tmp_path, *points)
    assert "2/2 jobs: 0 measured, 2 cached" in again.stdout
    header = next(line for line in again.stdout.splitlines() if "% of reference" in line)
    assert header.rstrip(" ┃│").endswith("measured")
    assert again.stdout.count("before (cached") == 2  # ", reused as asked" where not clean
    client = MlflowClient(store)
    assert [len(children(client, p)) for p in parents(client, "transpose_ladder_cpu")] == [2, 2]


def test_the_opencl_device_is_named_once_per_process_not_per_job(tmp_path):
    done = sweep(tmp_path, "kernel=matmul_2", "size=16,24,32",
                 f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}")
    assert "3/3 jobs: 3 measured" in done.stdout
    assert "OpenCL device:" not in done.stdout + done.stderr  # the terminal keeps to results
    logged = sum(log.read_text().count("OpenCL device:")
                 for log in tmp_path.glob("multirun/*/*/*/app.log"))
    assert logged == 1
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    jobs = [run for run in client.search_runs([client.get_experiment_by_name("gemmlab")
                                               .experiment_id])
            if run.data.tags.get(names.SWEEP) != "true"
            and run.data.tags.get(names.SERIES) != "true"]
    assert len(jobs) == 3 and all(names.DEVICE_SELECTION in run.data.tags for run in jobs)


# ------------------------------------------------------------ how a sweep ends (issue 39)

BROKEN = Path(__file__).resolve().parent / "broken_kernels"


def gemmlab_sweep(cwd: Path, *overrides: str, quick: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner", "-m", *(QUICK if quick else ()),
                           *overrides], cwd=cwd,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "200"})


def test_a_sweep_with_a_failed_job_exits_1_and_one_with_refusals_only_exits_0(tmp_path):
    """A script tells a clean sweep from a failed one by the exit status; refused jobs are the
    spec doing its job (test_a_sweep_is_one_parent_with_its_children_and_counts exits 0)."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = gemmlab_sweep(tmp_path, f"kernel_dirs=[{BROKEN}]",
                         f"hydra.searchpath=[file://{BROKEN / 'conf'}]",
                         "kernel=clobber_1,matmul_1", "size=32", f"tracking.uri={store}")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "2/2 jobs: 1 measured, 0 cached (measured before), 0 refused by constraints or " \
           "limits, 1 failed" in done.stdout
    client = MlflowClient(store)
    (parent,) = parents(client)
    assert parent.info.status == "FINISHED"
    assert statuses(children(client, parent)) == ["failed", "ok"]


@pytest.mark.parametrize("backend", ["cuda", "opencl"])
def test_a_gpu_pool_larger_than_the_gpus_here_is_one_line_before_any_job(tmp_path, backend):
    database = tmp_path / "mlflow.db"
    done = gemmlab_sweep(tmp_path, "hydra/launcher=gpus", "gpus=64", f"backend={backend}",
                         "kernel=matmul_1", "size=16,24", f"tracking.uri=sqlite:///{database}",
                         quick=False)
    assert done.returncode == 1
    lines = [line for line in (done.stdout + done.stderr).strip().splitlines()
             if "[HYDRA]" not in line]
    assert len(lines) == 1 and lines[0].startswith("gemmlab: error: gpus=64 gives each of 64 "
                                                   "parallel jobs a GPU of its own, but "), lines
    assert not database.exists()  # nothing recorded, no job started


def test_a_search_whose_first_jobs_fail_the_same_way_before_a_device_stops(tmp_path):
    """No GPU, no CuPy, no such platform: every point would fail the same way, one by one (80
    of matmul_9's search took 52 s, then a traceback). The sweep stops after its first three
    jobs with one line, the parent FAILED with the reason."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = gemmlab_sweep(tmp_path, "+search=matmul_3", "backend.platform=no-such-platform",
                         "size=32", "hydra.sweeper.n_trials=8", f"tracking.uri={store}")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gemmlab: error: stopped the sweep after its first 3 jobs: each "
                           "failed before reaching a device, the same way") and \
        "backend.platform=no-such-platform matches no platform" in last, last
    assert "3/8 jobs: 0 measured" in done.stdout and "; 5 did not run" in done.stdout
    client = MlflowClient(store)
    (parent,) = parents(client, "matmul_3_tuning")
    assert parent.info.status == "FAILED"
    assert parent.data.tags["failure_reason"] == last.removeprefix("gemmlab: error: ")
    assert statuses(children(client, parent)) == ["failed"] * 3


def test_a_search_that_completes_no_trial_is_one_line(tmp_path):
    """Too few trials to stop early, all failed: the Optuna sweeper's "No trials are completed
    yet." was a traceback and left the parent KILLED."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = gemmlab_sweep(tmp_path, "+search=matmul_3", "backend.platform=no-such-platform",
                         "size=32", "hydra.sweeper.n_trials=2", f"tracking.uri={store}")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "ValueError" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == ("gemmlab: error: the search completed no trial: every trial failed or was "
                    "refused (the summary above counts them, with their reasons)")
    (parent,) = parents(MlflowClient(store), "matmul_3_tuning")
    assert parent.info.status == "FAILED"


def test_the_summary_keeps_brackets_in_reasons(capsys):
    """rich markup ate `[cuda]` from the install hint of a failure reason."""
    from types import SimpleNamespace

    from runner.sweep.summary import SweepSummary, print_sweep_summary

    reason = "backend=cuda needs CuPy, which is not installed: pip install 'gemmlab[cuda]'"
    failed = SimpleNamespace(
        info=SimpleNamespace(status="FAILED", run_id="r", start_time=0),
        data=SimpleNamespace(tags={"gemmlab.status": "failed", "failure_reason": reason},
                             params={}, metrics={}))
    print_sweep_summary(SweepSummary.of([failed]), 1, "[x] sweep", "p", "sqlite:///m.db")
    out = capsys.readouterr().out
    assert f"1 × failed: {reason}" in out


def test_the_summaries_name_the_fastest_job_of_each_cell_its_tiling_and_how_they_pick(capsys):
    """Issue 58: the terminal's table, the parent's description and its size × kernel table
    all show the fastest measured job of each kernel, size and backend with its tiling (a
    later, slower trial never replaces it), and each says how it picks."""
    from runner.sweep.summary import SweepSummary, description, print_sweep_summary

    jobs = [_job("matmul_3", 64, 64, 64, 7.5, tiling={"TS": 8, "WPT": 8}, start=1),
            _job("matmul_3", 64, 64, 64, 7.03, tiling={"TS": 16, "WPT": 16}, start=9),
            _job("matmul_3", 64, 64, 64, 7.9, tiling={"TS": 32, "WPT": 8}, start=5,
                 tags={"gemmlab.status": "refused"}),  # no measurement, whatever its metric
            _job("matmul_3", 64, 64, 64, 6.0, "cuda", tiling={"TS": 4, "WPT": 4}, start=3)]
    summary = SweepSummary.of(jobs)
    assert {cell: summary.best[cell].data.params["kernel.params.TS"]
            for cell in summary.best} == {("matmul_3", "64x64x64", "opencl", "CPU"): "8",
                                          ("matmul_3", "64x64x64", "cuda", "CPU"): "4"}
    print_sweep_summary(summary, 4, "search", "p", "sqlite:///m.db")
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "opencl" in line and "matmul_3" in line)
    assert "TS=8 WPT=8" in row and "7.5 GFLOPS" in row
    assert "7.03" not in out and "7.9" not in out
    assert ("best: the fastest measured run (ok or cached) of each step, size, backend and "
            "device, by its median rate") in " ".join(out.split())
    text = description("search", summary, 4, ["CPU"])
    assert "| matmul_3 | 64x64x64 | opencl | CPU | TS=8 WPT=8 | 7.5 GFLOPS |" in text
    assert "(the fastest measured run (ok or cached) of each step" in text
    assert "(GFLOPS), the fastest measured job (ok or cached) by its median rate," in text
    assert "| 64³ | 6 | **★ 7.5** |" in text  # columns: matmul_3 cuda, matmul_3 opencl


SHARED = {"host.hygiene": "shared", "host.hygiene_reasons":
          "other processes used 1.50 of 2 CPU cores over 200 ms (shared from 0.25)"}
CLEAN = {"host.hygiene": "clean", "host.hygiene_reasons": ""}


def _as_if_timed(client: MlflowClient, run, tags: dict, noise: float) -> None:
    """Make a finished run read as if timed so (its host's hygiene, its median's noise), the
    condition set rather than waited for: this host's real load is whatever it is."""
    for key, value in tags.items():
        client.set_tag(run.info.run_id, key, value)
    client.log_metric(run.info.run_id, "time/noise", noise)


def test_a_measurement_not_clean_is_measured_again_unless_asked_and_then_marked(tmp_path):
    """Issue 58: a sweep run one job at a time after a parallel one reused the numbers its jobs
    took on a shared host without a word. A run timed on a shared host or with noisy samples is
    measured again (saying which run and why); reused only with reuse_unclean=true, and then its
    caveats and that it was asked for are in its line, its tags, the summary and the report; a
    clean run with the key is reused as before, without a word."""
    from runner.results.report import main as report_main

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    points = ["kernel=matmul_2", "size=24", f"tracking.uri={store}"]
    client = MlflowClient(store)

    def job(index: int):
        (only,) = children(client, parents(client)[index])
        return only

    sweep(tmp_path, *points)
    first = job(0)
    _as_if_timed(client, first, SHARED, noise=0.001)
    done = sweep(tmp_path, *points)
    second = job(1)
    assert second.data.tags["gemmlab.status"] == "ok", "measured again"
    assert second.data.tags["gemmlab.not_reused"].startswith(
        f"run {first.info.run_id[:8]}… measured it, not clean: host shared (other processes "
        "used 1.50 of 2 CPU cores")
    assert f"not reused: run {first.info.run_id[:8]}… measured it, not clean: host shared" \
        in done.stdout
    assert "1/1 jobs: 1 measured (1 again: the earlier run not clean), 0 cached" in done.stdout

    for run in (first, second):  # a clean host, but a median known only to ±20%
        _as_if_timed(client, run, CLEAN, noise=0.2)
    done = sweep(tmp_path, *points)
    third = job(2)
    assert third.data.tags["gemmlab.status"] == "ok"
    assert "not clean: samples noisy: median ±20.0%" in third.data.tags["gemmlab.not_reused"]

    _as_if_timed(client, third, SHARED, noise=0.001)
    done = sweep(tmp_path, *points, "reuse_unclean=true")
    fourth = job(3)
    assert fourth.data.tags["gemmlab.status"] == "cached"
    assert fourth.data.tags["gemmlab.reused_from"] == third.info.run_id  # the newest
    assert {key: fourth.data.tags[key] for key in SHARED} == SHARED
    assert fourth.data.tags["gemmlab.reused_unclean"] == (
        f"host shared ({SHARED['host.hygiene_reasons']}); reused as asked (reuse_unclean=true)")
    assert "host shared" in fourth.info.run_name
    line = next(line for line in done.stdout.splitlines() if "cached: measured in run" in line)
    assert f"cached: measured in run {third.info.run_id[:8]}…" in line
    assert f"host shared: {SHARED['host.hygiene_reasons']}" in line
    assert "reused though not clean, as asked (reuse_unclean=true)" in line
    assert ("1/1 jobs: 0 measured, 1 cached (measured before; 1 not clean, reused as asked)"
            in done.stdout)
    assert "before (cached, reused as asked)" in done.stdout
    parent = parents(client)[3]
    assert f"(cached from `{third.info.run_id[:8]}`, reused as asked (reuse_unclean=true))" \
        in parent.data.tags["mlflow.note.content"]
    page = report_main(["--sweep", parent.info.run_id, "--uri", store,
                        "--out", str(tmp_path / "pages")])[0].read_text()
    assert f"| matmul_2 (cached from `{third.info.run_id[:8]}`, not clean, reused as asked) |" \
        in page
    assert f"| host shared ({SHARED['host.hygiene_reasons']}) |" in page

    _as_if_timed(client, first, CLEAN, noise=0.001)  # an older clean run with the key
    done = sweep(tmp_path, *points)
    fifth = job(4)
    assert fifth.data.tags["gemmlab.status"] == "cached"
    assert fifth.data.tags["gemmlab.reused_from"] == first.info.run_id
    assert "gemmlab.reused_unclean" not in fifth.data.tags
    assert "not clean" not in done.stdout and "1/1 jobs: 0 measured, 1 cached (measured " \
        "before), 0 refused" in done.stdout
