"""A real run on the CPU, queried back from MLflow: params, metrics, tags, artifacts."""

import os
import subprocess
import sys

import mlflow
import pytest
from conftest import compose_config
from mlflow.tracking import MlflowClient

from runner.app import run


@pytest.fixture
def store(tmp_path):
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _only_run(store, experiment="gemmlab"):
    mlflow.set_tracking_uri(store)
    runs = mlflow.search_runs(experiment_names=[experiment], output_format="list")
    assert len(runs) == 1
    return runs[0]


def test_a_run_is_recorded_with_everything(store):
    cfg = compose_config("backend.device_type=cpu", "kernel=matmul_2", "kernel.params.TS=8",
                         "m=96", "n=80", "k=40", "timing.repeats=5", "timing.warmup=1",
                         f"tracking.uri={store}")
    assert run(cfg) > 0
    recorded = _only_run(store)
    assert recorded.info.status == "FINISHED"
    params, metrics, tags = recorded.data.params, recorded.data.metrics, recorded.data.tags
    assert params["backend.name"] == "opencl"
    assert params["kernel.name"] == "matmul_2"
    assert params["kernel.params.TS"] == "8"
    assert (params["M"], params["N"], params["K"]) == ("96", "80", "40")
    assert params["dtype"] == "float32" and params["seed"] == "0"
    for key in ("time_ms/median", "time_ms/min", "time_ms/max", "time_ms/q1", "time_ms/q3",
                "perf/gflops", "bw/gbps", "check/rel_error", "vendor/gflops",
                "kernel/shared_bytes"):  # perf/pct_of_vendor: where the baseline was usable
        assert key in metrics, key
    assert metrics["check/rel_error"] < 1e-5
    assert metrics["time_ms/min"] <= metrics["time_ms/median"] <= metrics["time_ms/max"]
    assert metrics["perf/gflops"] == pytest.approx(2 * 96 * 80 * 40 / metrics["time_ms/median"]
                                                   / 1e6)
    assert metrics["kernel/shared_bytes"] == 2 * 8 * 8 * 4
    assert "kernel/registers" not in metrics, "CPU drivers cannot tell registers: absent, not zero"
    assert tags["device.type"] == "cpu" and tags["device.name"]
    assert tags["device.driver"] and tags["device.platform"]
    assert tags["gemmlab.runner_version"]
    assert tags["vendor.name"].startswith("numpy")
    # The headline: against the library of the step's own precision, named; both kept.
    assert tags["perf.reference"] == "numpy SGEMM"
    if "vendor.unusable" in tags:  # a noisy or disturbed baseline (a busy host): no % at all
        assert "perf/pct_of_reference" not in metrics and "perf/pct_of_vendor" not in metrics
    else:
        assert metrics["perf/pct_of_reference"] == metrics["perf/pct_of_vendor"]
    # The run name leads with kernel and size, then the rate and the reference it is against.
    assert tags["mlflow.runName"].startswith("matmul_2 96x80x40 · ")
    assert " GFLOPS · " in tags["mlflow.runName"] and "numpy SGEMM" in tags["mlflow.runName"]
    assert tags["mlflow.runName"].split(" · ")[-1] == "opencl TS=8"
    artifacts = {a.path for a in MlflowClient(store).list_artifacts(recorded.info.run_id)}
    assert {"source", "compile_log.txt", "timing", "config.yaml"} <= artifacts
    config = mlflow.artifacts.load_text(f"runs:/{recorded.info.run_id}/config.yaml")
    assert "TS: 8" in config and "m: 96" in config
    source = mlflow.artifacts.load_text(
        f"runs:/{recorded.info.run_id}/source/matmul_2.cl")
    assert "#define TS 8" in source and "-DTS=8" in source


def test_a_copy_run_reports_bandwidth_against_the_device_copy(store):
    cfg = compose_config("backend.device_type=cpu", "kernel=transpose_1", "m=65", "n=130",
                         "timing.repeats=3", f"tracking.uri={store}")
    assert run(cfg) > 0
    metrics = _only_run(store).data.metrics
    assert metrics["bw/gbps"] == pytest.approx(2 * 65 * 130 * 4 / metrics["time_ms/median"] / 1e6)
    assert "vendor/gbps" in metrics and "perf/gflops" not in metrics
    assert metrics["check/rel_error"] == 0.0
    recorded = _only_run(store)
    assert recorded.data.tags["perf.reference"] == "device copy"
    assert recorded.data.tags["mlflow.runName"].startswith("transpose_1 65x130 · ")
    assert " GB/s · " in recorded.data.tags["mlflow.runName"]


def test_python_m_runner_works_from_any_directory(tmp_path):
    """The installed entry point, in a directory that is not the checkout; the store lands there."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "runner", "backend.device_type=cpu", "kernel=matmul_1",
         "size=33", "timing.repeats=3", "timing.warmup=0"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "matmul_1" in done.stdout and "GFLOPS" in done.stdout
    assert (tmp_path / "mlflow.db").is_file()
    recorded = _only_run(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert recorded.info.status == "FINISHED"


def test_recorded_shared_bytes_count_the_launchs_dynamic_memory():
    """A step whose stages live in dynamic shared memory (matmul_12) records what one block
    holds, not only the static bytes the compiler reports."""
    from runner.backends.base import KernelResources
    from runner.run.figures import resource_metrics

    metrics = resource_metrics(KernelResources(local_memory_bytes=512), dynamic_local_bytes=4096)
    assert metrics["kernel/shared_bytes"] == 4608
    assert metrics["kernel/dynamic_shared_bytes"] == 4096
    assert resource_metrics(KernelResources())["kernel/shared_bytes"] is None  # not reported


def test_artifacts_live_beside_a_sqlite_store_not_in_the_working_directory(tmp_path,
                                                                           monkeypatch):
    """Copying the store's folder keeps the artifacts: they go to mlartifacts/ beside the
    database, whatever directory the command ran in."""
    from runner.record.tracking import artifact_location

    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    store = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    cfg = compose_config("backend.device_type=cpu", "kernel=matmul_1", "size=16",
                         "timing.repeats=3", "timing.warmup=0", f"tracking.uri={store}")
    assert run(cfg) > 0
    recorded = _only_run(store)
    assert recorded.info.artifact_uri.startswith((tmp_path / "store" / "mlartifacts").as_uri())
    assert (tmp_path / "store" / "mlartifacts").is_dir()
    assert not (elsewhere / "mlruns").exists() and not (elsewhere / "mlartifacts").exists()
    assert artifact_location("sqlite:///x.db") == (elsewhere / "mlartifacts").as_uri()
    assert artifact_location("http://127.0.0.1:5000") is None
