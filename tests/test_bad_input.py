"""Each bad input: one clear line naming the value and the rule, exit 1; a FAILED run in MLflow
where the device or the kernel failed, no run at all where the config alone was refused."""

import dataclasses
import os
import subprocess
import sys

import mlflow
import pytest
from conftest import compose_config

import runner.run.execute
from runner.app import run


@pytest.fixture
def store(tmp_path):
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def failed_reason(store) -> str:
    mlflow.set_tracking_uri(store)
    runs = mlflow.search_runs(experiment_names=["gemmlab"], output_format="list")
    assert len(runs) == 1
    assert runs[0].info.status == "FAILED"
    assert "perf/gflops" not in runs[0].data.metrics, "a failed run never reports speed"
    return runs[0].data.tags["failure_reason"]


def run_failing(store, *overrides) -> str:
    device = [] if "backend=cuda" in overrides else ["backend.device_type=cpu"]
    # In this process (isolate=false): the tests shrink the device by patching its backend here.
    cfg = compose_config(*overrides, *device, "timing.repeats=3", f"tracking.uri={store}",
                         "isolate=false")
    assert run(cfg) is None
    return failed_reason(store)


def run_refused(store, capsys, *overrides) -> str:
    """A config refused before the store is opened: one line, and no run recorded."""
    cfg = compose_config(*overrides, "backend.device_type=cpu", "timing.repeats=3",
                         f"tracking.uri={store}")
    assert run(cfg) is None
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gemmlab: error: "), lines
    mlflow.set_tracking_uri(store)
    assert mlflow.search_runs(search_all_experiments=True, output_format="list") == []
    return lines[0]


def test_disallowed_tile_value(store, capsys):
    reason = run_refused(store, capsys, "kernel=matmul_2", "kernel.params.TS=12", "size=64")
    assert "TS=12 is not an allowed value" in reason and "allowed: 4, 8, 16, 32" in reason


def test_failing_constraint_names_rule_and_reason(store, capsys):
    reason = run_refused(store, capsys, "kernel=matmul_2", "kernel.params.TS=32",
                         "kernel.allowed.TS=[4,8,16,32,64]", "kernel.params.TS=64", "size=64")
    assert "`TS * TS <= 1024` fails (TS=64" in reason and "CUDA block at most 1024" in reason


@pytest.mark.parametrize("override", ["size=0", "m=-4", "k=0"])
def test_size_not_positive(store, capsys, override):
    reason = run_refused(store, capsys, "kernel=matmul_2", override)
    assert "is out of range (allowed: 1..2147483647" in reason


def _shrink_device(monkeypatch, **changes):
    from runner.backends.opencl import OpenCLBackend

    real = OpenCLBackend.device_info
    monkeypatch.setattr(OpenCLBackend, "device_info",
                        lambda self: dataclasses.replace(real(self), **changes))


def test_work_group_larger_than_the_device_allows(store, monkeypatch):
    _shrink_device(monkeypatch, max_work_group_size=64)
    reason = run_failing(store, "kernel=matmul_2", "kernel.params.TS=16", "size=32")
    assert "16x16 = 256 work-items exceeds the 64" in reason


def test_local_memory_over_the_device_limit(store, monkeypatch):
    _shrink_device(monkeypatch, local_memory_bytes=1024)
    reason = run_failing(store, "kernel=matmul_2", "kernel.params.TS=16", "size=32")
    assert "2048 bytes of local/shared memory" in reason and "over the 1024" in reason


def test_a_step_without_a_source_for_the_backend_is_refused_before_a_device_is_opened(store,
                                                                                     capsys):
    reason = run_refused(store, capsys, "kernel=matmul_12", "size=64")
    assert reason == ("gemmlab: error: matmul_12 has no opencl source (it is written for "
                      "backend=cuda only; see its YAML)")


def test_dynamic_local_memory_over_the_device_limit(store, monkeypatch):
    """A launch's `local_bytes` (dynamic local memory) against what the device allows, before
    anything is compiled."""
    _shrink_device(monkeypatch, local_memory_bytes=4096, dynamic_local_memory_bytes=4096)
    reason = run_failing(store, "kernel=matmul_2", "size=32",
                         "kernel.launches.0.local_bytes='1024 * TS'")
    assert "matmul_2 asks for 32768 bytes of dynamic local/shared memory" in reason  # TS=32
    assert "over the 4096 that" in reason


def test_problem_larger_than_device_memory(store, monkeypatch):
    _shrink_device(monkeypatch, global_memory_bytes=1 << 20)
    reason = run_failing(store, "kernel=matmul_2", "size=1024")
    assert "needs 0.01 GB of device memory" in reason and "has 0.00 GB" in reason
    assert "copy" not in reason  # inputs this small are checked on the host, with no copy


def test_wrong_result_fails_verification_and_reports_no_speed(store, tmp_path, monkeypatch):
    broken = tmp_path / "matmul_2.cl"
    source = runner.run.execute.kernel_source_path("opencl", "matmul_2.cl").read_text()
    broken.write_text(source.replace("acc += Asub[ty][k] * Bsub[k][tx];",
                                     "acc += Asub[ty][k] * Bsub[k][tx] * 1.001f;"))
    monkeypatch.setattr(runner.run.execute, "kernel_source_path", lambda backend, name, *dirs: broken)
    reason = run_failing(store, "kernel=matmul_2", "size=48")
    assert "wrong result" in reason and "exceeds the tolerance" in reason


def test_cuda_without_a_gpu_is_a_clear_failure(store):
    from runner.backends.cuda import gpu_count

    if gpu_count():
        pytest.skip("a GPU is present")
    reason = run_failing(store, "backend=cuda", "kernel=matmul_2", "size=64")
    assert "needs an NVIDIA GPU" in reason


def test_single_run_exits_non_zero_with_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "runner", "backend.device_type=cpu", "kernel.params.TS=5"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 1
    assert "gemmlab: error: matmul_2: TS=5 is not an allowed value" in done.stderr
    assert "Traceback" not in done.stderr


def test_config_errors_exit_non_zero_with_hydras_message(tmp_path):
    done = subprocess.run([sys.executable, "-m", "runner", "kernel=nonesuch"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "nonesuch" in done.stderr and "Available options" in done.stderr


def test_unusable_tracking_store_is_one_clear_line(capsys):
    cfg = compose_config("backend.device_type=cpu", "size=16",
                         "tracking.uri=nosuchscheme://nowhere")
    assert run(cfg) is None
    assert "cannot record in MLflow at tracking.uri=" in capsys.readouterr().err
