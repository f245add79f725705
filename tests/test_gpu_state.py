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
from runner.errors import Refused
from runner.record import names
from runner.run import gpu_state, vendor
from runner.run.figures import record_energy
from runner.run.gpu_state import EnergySpan, GpuState, Monitor, energy_probe, energy_span


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


class _Counter:
    """NVML's energy counter as a fake pynvml gives it: `watts` drawn since it was made, in mJ,
    moving in steps of `step_s` (as the real one does, every few tens of milliseconds)."""

    def __init__(self, watts: float, step_s: float = 0.02):
        self.watts, self.step_s, self.since = watts, step_s, time.perf_counter()

    def __call__(self, handle) -> int:
        elapsed = time.perf_counter() - self.since
        return int(self.watts * 1000 * (elapsed // self.step_s) * self.step_s)


def _sleeping_launches(launch_ms: float, ran: list):
    def run(count: int) -> float:  # count launches of launch_ms each, their device time
        ran.append(count)
        time.sleep(count * launch_ms / 1000)
        return count * launch_ms
    return run


def test_an_energy_span_gives_the_power_between_the_counters_steps(monkeypatch):
    import pynvml

    monkeypatch.setattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption", _Counter(450.0))
    ran = []
    spent = energy_span("gpu", _sleeping_launches(9.5, ran), 9.5, 1.2)
    assert ran == [127]  # ceil(1.2 s / 9.5 ms): at least the seconds asked for
    assert spent.launches == 127 and spent.power_w == pytest.approx(450.0, rel=0.05)
    assert spent.joules_per_launch == pytest.approx(spent.power_w * 9.5e-3)
    metrics = spent.metrics("energy/", flops=2 * 8192**3, nbytes=0)
    assert metrics["energy/gflops"] == pytest.approx(2 * 8192**3 / 9.5e-3 / 1e9)
    assert metrics["energy/gflops_per_watt"] == pytest.approx(
        metrics["energy/gflops"] / spent.power_w)  # GFLOP per joule is GFLOPS per watt


def test_no_energy_without_a_counter_a_second_or_its_steps(monkeypatch):
    import pynvml

    assert energy_span(None, _sleeping_launches(1.0, []), 1.0, 2.0) is None
    assert energy_probe(None, 2.0) is None and energy_probe("gpu", 0.0) is None
    monkeypatch.setattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption", _Counter(450.0))
    monkeypatch.setattr(gpu_state, "ENERGY_MAX_LAUNCHES", 50)
    ran = []
    assert energy_span("gpu", _sleeping_launches(10.0, ran), 10.0, 1.5) is None  # 0.5 s
    assert ran == [50]
    monkeypatch.setattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption", _Counter(450.0, 2.0))
    assert energy_span("gpu", _sleeping_launches(10.0, []), 10.0, 1.0) is None  # one step

    def no_counter(handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption", no_counter)
    ran = []
    assert energy_span("gpu", _sleeping_launches(10.0, ran), 10.0, 1.0) is None
    assert ran == []  # nothing launched for a counter that is not there


class _Tags:
    def __init__(self):
        self.tags_seen, self.metrics_seen = {}, {}

    def tags(self, values):
        self.tags_seen.update(values)

    def metrics(self, values):
        self.metrics_seen.update(values)


def test_the_kernels_work_per_joule_is_set_against_the_baselines(tmp_path):
    from runner.config.spec import ProblemSize, plan_kernel

    plan = plan_kernel(compose_config("kernel=matmul_9").kernel, ProblemSize(8192, 8192, 8192))
    recorder, metrics = _Tags(), {}
    record_energy(recorder, metrics, plan, names.ENERGY_PREFIX, EnergySpan(200, 2000.0, 700.0))
    record_energy(recorder, metrics, plan, names.VENDOR_ENERGY_PREFIX,
                  EnergySpan(100, 2000.0, 350.0), names.X_VENDOR_PER_JOULE)
    # twice the launches in the same time at twice the power: the same work per joule
    assert metrics[names.X_VENDOR_PER_JOULE] == pytest.approx(1.0)
    assert metrics["energy/gflops_per_watt"] == pytest.approx(
        plan.flops / (700.0 * 2.0 / 200) / 1e9)
    record_energy(recorder, metrics, plan, names.VENDOR_TF32_ENERGY_PREFIX, None,
                  names.X_VENDOR_TF32_PER_JOULE)
    assert names.X_VENDOR_TF32_PER_JOULE not in metrics  # absent, never 0
    assert "lasted under a second" in recorder.tags_seen["vendor_tf32_energy.unknown"]


def test_an_energy_span_is_refused_too_short_or_beyond_the_time_limit(tmp_path):
    from runner.config.validate import validate

    validate(compose_config("timing.energy_s=2"))
    with pytest.raises(Refused, match="under 1 s tells no energy"):
        validate(compose_config("timing.energy_s=0.5"))
    with pytest.raises(Refused, match="not under timing.timeout_s"):
        validate(compose_config("timing.energy_s=30", "timing.timeout_s=20"))


def test_a_cpu_run_asked_for_energy_says_why_it_has_none(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert run(compose_config("backend.device_type=cpu", "kernel=matmul_2", "size=32",
                              "timing.repeats=3", "timing.energy_s=1",
                              f"tracking.uri={store}")) > 0
    mlflow.set_tracking_uri(store)
    (recorded,) = mlflow.search_runs(experiment_names=["gemmlab"], output_format="list")
    assert "needs an NVIDIA GPU's energy counter" in recorded.data.tags[names.ENERGY_UNKNOWN]
    assert not any(name.startswith(("energy/", "vendor_energy/"))
                   for name in recorded.data.metrics)


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


@pytest.mark.gpu
@requires_cuda_gpu
def test_a_gpu_run_records_its_and_cublas_work_per_joule(tmp_path):
    """timing.energy_s: the kernel's and cuBLAS SGEMM's (and cuBLAS TF32's, for a TF32 step)
    launches back to back for a second and more, their power from NVML's energy counter."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for kernel in ("matmul_9", "matmul_13"):
        assert run(compose_config("backend=cuda", f"kernel={kernel}", "size=4096",
                                  "timing.energy_s=1.5", f"tracking.uri={store}",
                                  "tracking.inspect=false")) > 0
    mlflow.set_tracking_uri(store)
    simt, tf32 = mlflow.search_runs(experiment_names=["gemmlab"], output_format="list",
                                    order_by=["attributes.start_time ASC"])
    for recorded, prefixes in ((simt, ("energy/", "vendor_energy/")),
                               (tf32, ("energy/", "vendor_energy/", "vendor_tf32_energy/"))):
        metrics = recorded.data.metrics
        for prefix in prefixes:
            assert 50 < metrics[f"{prefix}power_w"] < 1500, (prefix, metrics)
            assert metrics[f"{prefix}span_s"] >= 1.0 and metrics[f"{prefix}gflops_per_watt"] > 0
        assert 0.5 < metrics["energy/gflops"] / metrics[names.GFLOPS] < 1.1
        assert metrics[names.X_VENDOR_PER_JOULE] > 0
        assert metrics["time_s/energy"] >= 1.5
    assert tf32.data.metrics[names.X_VENDOR_TF32_PER_JOULE] > 0


def test_a_run_asked_for_its_work_per_joule_does_not_reuse_one_without_it():
    from runner.backends import make_backend
    from runner.config.spec import ProblemSize, plan_kernel
    from runner.record.resume import measurement_key

    def key(*overrides):
        cfg = compose_config("backend.device_type=cpu", "kernel=matmul_2", "size=32", *overrides)
        return measurement_key(cfg, make_backend(cfg.backend),
                               plan_kernel(cfg.kernel, ProblemSize(32, 32, 32)))

    assert key() == key("timing.energy_s=0")  # off: the key earlier runs were recorded with
    assert key("timing.energy_s=2") not in (key(), key("timing.energy_s=3"))
