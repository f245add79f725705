"""The GPU's state during a measurement (runner/run/gpu_state.py) and the CPU baseline's
threads and noise (runner/run/vendor.py). On the CPU NVML has nothing to say: every GPU value is
absent. On an NVIDIA GPU (marked `gpu`): a clean run is `clean`, and one measured while another
process loops GEMMs on the same GPU is `shared`."""

import subprocess
import sys
import time

import mlflow
import numpy as np
import pytest
from conftest import compose_config, requires_cuda_gpu

from runner.app import run
from runner.run import vendor
from runner.run.gpu_state import GpuState, Monitor


def test_hygiene_names_neighbours_before_heat_and_ignores_the_power_cap():
    assert GpuState(reasons={"sw_power_cap", "gpu_idle"}).hygiene == "clean"
    throttled = GpuState(reasons={"sw_power_cap", "hw_thermal_slowdown"})
    assert throttled.hygiene == "throttled"
    assert "hw_thermal_slowdown" in throttled.why() and "sw_power_cap" not in throttled.why()
    shared = GpuState(reasons={"hw_slowdown"}, others={4321})
    assert shared.hygiene == "shared" and "pid 4321" in shared.why()


def test_metrics_are_medians_and_absent_when_nothing_was_sampled():
    state = GpuState(sm_clock_mhz=[1980, 1755, 1980], energy_j=1300.0, span_s=2.0)
    metrics = state.metrics()
    assert metrics["gpu/sm_clock_mhz"] == 1980 and metrics["gpu/sm_clock_mhz_min"] == 1755
    assert metrics["gpu/power_w"] == 650.0 and metrics["gpu/temp_c"] is None
    assert all(value is None for value in GpuState().metrics().values())


def test_energy_and_power_only_over_a_span_the_counter_can_tell():
    assert GpuState(energy_j=0.09, span_s=0.07).power() is None  # too short: absent, not 0
    assert GpuState(energy_j=0.0, span_s=3.0).energy() is None
    assert GpuState(energy_j=900.0, span_s=1.5).power() == 600.0


def test_without_a_gpu_handle_the_monitor_records_nothing():
    with Monitor(None) as state:
        time.sleep(0.05)
    assert state.sm_clock_mhz == [] and state.energy_j is None and state.hygiene == "clean"


def test_a_cpu_run_records_no_gpu_state_and_the_blas_threads(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose_config("backend.device_type=cpu", "kernel=matmul_2", "size=64",
                         "timing.repeats=5", f"tracking.uri={store}")
    assert run(cfg) > 0
    mlflow.set_tracking_uri(store)
    (recorded,) = mlflow.search_runs(experiment_names=["gemmlab"], output_format="list")
    assert not any(name.startswith(("gpu/", "vendor_gpu/")) for name in recorded.data.metrics)
    assert "gpu.hygiene" not in recorded.data.tags
    assert recorded.data.tags["vendor.device"] == "host CPU"
    assert 1 <= int(recorded.data.tags["vendor.blas_threads"]) <= vendor.blas_threads() + 1


def test_blas_threads_leave_out_the_cores_other_work_keeps_busy(monkeypatch):
    monkeypatch.setattr(vendor.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(vendor.os, "getloadavg", lambda: (1.0, 1.0, 1.0))  # this process alone
    assert vendor.blas_threads() == 4
    monkeypatch.setattr(vendor.os, "getloadavg", lambda: (3.2, 1.0, 1.0))
    assert vendor.blas_threads() == 2
    monkeypatch.setattr(vendor.os, "getloadavg", lambda: (9.0, 1.0, 1.0))
    assert vendor.blas_threads() == 1


def test_a_noisy_cpu_baseline_is_measured_again_flagged_and_never_reused(monkeypatch):
    calls = []

    def noisy(once, warmup, repeats, label, before_each=None):
        once()
        calls.append(label)
        return [1.0, 1.0, 3.0, 1.0, 5.0, 9.0]

    monkeypatch.setattr(vendor, "measure", noisy)
    A = np.ones((8, 8), dtype=np.float32)
    samples, C, notes = vendor.numpy_sgemm(A, A, 0, 6)
    assert len(calls) == 2 and "noisy" in notes and "not reused" in notes["noisy"]
    calls.clear()
    monkeypatch.setattr(vendor, "measure", lambda once, *args, **kwargs: [2.0, 2.01, 1.99, 2.0])
    samples, C, notes = vendor.numpy_sgemm(A, A, 0, 4)
    assert "noisy" not in notes and np.allclose(C, A @ A)


@pytest.mark.gpu
@requires_cuda_gpu
def test_a_gpu_run_says_clean_alone_and_shared_beside_another_process(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = ["backend=cuda", "kernel=matmul_9", "size=4096", "timing.repeats=600",
                 f"tracking.uri={store}", "tracking.inspect=false"]
    assert run(compose_config(*overrides)) > 0
    loader = subprocess.Popen([sys.executable, "-c",
                               "import cupy; a = cupy.ones((8192, 8192), cupy.float32)\n"
                               "while True: a @ a; cupy.cuda.Device().synchronize()"])
    try:
        time.sleep(5)  # CuPy's start and its first GEMM
        assert run(compose_config(*overrides)) > 0
    finally:
        loader.kill()
    mlflow.set_tracking_uri(store)
    alone, beside = mlflow.search_runs(experiment_names=["gemmlab"], output_format="list",
                                       order_by=["attributes.start_time ASC"])
    assert alone.data.tags["gpu.hygiene"] in ("clean", "throttled"), alone.data.tags
    assert beside.data.tags["gpu.hygiene"] == "shared", beside.data.tags
    assert f"pid {loader.pid}" in beside.data.tags["gpu.hygiene_reasons"]
    for name in ("gpu/sm_clock_mhz", "gpu/power_w", "gpu/energy_j_per_launch",
                 "perf/gflops_per_watt", "vendor_gpu/sm_clock_mhz", "vendor_gpu/power_w"):
        assert alone.data.metrics.get(name, 0) > 0, name
    assert "shared" in beside.data.tags["mlflow.runName"]
