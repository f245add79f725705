"""The vendor baseline's cache: one library measurement per problem, shared by the steps that
differ in precision or tolerance; cuBLAS in TF32 mode only for a reduced-precision step; a
baseline disturbed by other work (the host's counters while it ran) set against no kernel."""

import numpy as np
import pytest
from conftest import compose_config

import runner.run.vendor as vendor
from runner.config.spec import ProblemSize, plan_kernel
from runner.run.operations import effective_check, make_problem


class FakeCuda:
    """Stands in for cuBLAS on a GPU: counts calls, returns the exact product."""
    name = "cuda"

    def __init__(self):
        self.calls = []

    def __call__(self, A, B, device_id, warmup, repeats, flush_l2=False, tf32=False,
                 energy=None):
        self.calls.append("tf32" if tf32 else "sgemm")
        notes = {} if energy is None else {"energy": energy(lambda count: 1.0 * count, 1.0)}
        return [1.0, 1.0, 1.0], (A.astype(np.float64) @ B).astype(np.float32), notes


@pytest.fixture
def fake(monkeypatch) -> FakeCuda:
    """cuBLAS replaced by FakeCuda on device 0, with no baseline measured yet."""
    fake = FakeCuda()
    monkeypatch.setattr(vendor, "cublas_sgemm", fake)
    monkeypatch.setattr(vendor, "_cuda_device_for", lambda backend: 0)
    monkeypatch.setattr(vendor, "_measured", {})
    monkeypatch.setattr(vendor, "_measured_tf32", {})
    return fake


def test_fp32_and_tf32_steps_share_one_sgemm_measurement(fake):
    size = ProblemSize(48, 40, 32)
    results = {}
    for name in ("matmul_9", "matmul_10", "matmul_11", "matmul_10"):
        cfg = compose_config(f"kernel={name}", "timing.repeats=3")
        plan = plan_kernel(cfg.kernel, size)
        problem = make_problem(plan.operation, size, seed=0)
        results[name] = vendor.vendor_baseline(fake, plan, problem, {}, cfg.timing,
                                               effective_check(cfg), 0)
    assert fake.calls == ["sgemm", "tf32"]  # not once per step, nor per tolerance
    assert results["matmul_9"].tf32 is None
    assert results["matmul_10"].tf32 is results["matmul_11"].tf32
    assert results["matmul_10"].rel_error == results["matmul_9"].rel_error


def test_a_baseline_asked_for_its_work_per_joule_carries_it_and_is_measured_for_it(fake):
    from runner.run.gpu_state import EnergySpan

    size = ProblemSize(48, 40, 32)
    spans = []

    def probe(run, launch_ms):
        spans.append(EnergySpan(10, run(10), 500.0))
        return spans[-1]

    cfg = compose_config("kernel=matmul_10", "timing.repeats=3", "timing.energy_s=2")
    plan = plan_kernel(cfg.kernel, size)
    problem = make_problem(plan.operation, size, seed=0)
    alone = vendor.vendor_baseline(fake, plan, problem, {}, cfg.timing, effective_check(cfg), 0)
    assert alone.energy is None and alone.tf32.energy is None and "energy" not in alone.notes
    probed = vendor.vendor_baseline(fake, plan, problem, {}, cfg.timing, effective_check(cfg), 0,
                                    probe)
    assert fake.calls == ["sgemm", "tf32", "sgemm", "tf32"]  # a baseline without it: not reused
    assert probed.energy is spans[0] and probed.tf32.energy is spans[1]
    assert "energy" not in probed.notes  # a span, never a vendor.<note> tag


def test_the_device_copy_baseline_carries_its_work_per_joule(monkeypatch):
    """A copy or transpose step's baseline (the device's own copy) runs back to back for its
    energy span as cuBLAS does for SGEMM: the probe times n copies in one span."""
    from runner.backends import make_backend
    from runner.run.execute import prepare
    from runner.run.gpu_state import EnergySpan

    monkeypatch.setattr(vendor, "_measured", {})
    cfg = compose_config("backend.device_type=cpu", "kernel=copy_1", "size=64",
                         "timing.repeats=3", "timing.warmup=1", "timing.energy_s=1")
    plan = plan_kernel(cfg.kernel, ProblemSize(64, 64, 64))
    backend = make_backend(cfg.backend)
    problem = make_problem(plan.operation, plan.size, seed=0)
    buffers = prepare(backend, cfg.kernel.sources, plan, problem).buffers
    spans = []

    def probe(run, launch_ms):
        spans.append((run(7), launch_ms))
        return EnergySpan(7, spans[-1][0], 300.0)

    result = vendor.vendor_baseline(backend, plan, problem, buffers, cfg.timing,
                                    effective_check(cfg), 0, probe)
    (busy_ms, launch_ms), = spans
    assert result.energy == EnergySpan(7, busy_ms, 300.0)
    assert busy_ms > 0 and launch_ms == float(np.median(result.samples_ms))


# ---------------------------------------------------------------- a disturbed baseline

def test_a_baseline_is_disturbed_where_others_took_the_cores_its_threads_needed():
    """Issue 58, point 6: the decision on what the host's counters said while it ran."""
    from runner.run.host_state import HostState

    def host(others, cores=2):
        return HostState(other_cpu_cores=others, own_cpu_cores=1.0, cpu_cores=cores,
                         span_s=0.2, measured_s=0.2)

    assert vendor.host_disturbed(None, 2) == "", "not on the host's CPUs"
    assert vendor.host_disturbed(HostState(unknown="no counters"), 2) == "", "cannot tell"
    assert vendor.host_disturbed(host(0.05), 2) == "", "an idle host"
    # Two threads on two cores: disturbed from a quarter core of others' use.
    assert vendor.host_disturbed(host(0.24), 2) == ""
    assert vendor.host_disturbed(host(1.5), 2) == (
        "other processes used 1.50 of 2 CPU cores while its 2 threads ran (disturbed from "
        "0.25): no % of it is recorded and it is not reused")
    # One thread: another process on the other core leaves it its own; two more do not.
    assert vendor.host_disturbed(host(1.0), 1) == ""
    assert "used 1.90 of 2 CPU cores while its 1 thread ran (disturbed from 1.25)" in \
        vendor.host_disturbed(host(1.9), 1)
    # A large host: a tenth of its cores is the margin.
    assert vendor.host_disturbed(host(6.0, cores=64), 64) == ""
    assert vendor.host_disturbed(host(6.5, cores=64), 64) != ""


def test_a_noisy_or_disturbed_baseline_is_unusable():
    """Both reasons, in the record's words; neither, usable."""
    clean = vendor.VendorResult("numpy SGEMM (host BLAS)", [1.0] * 5,
                                notes={"blas_threads": "2"})
    assert clean.unusable == ""
    both = vendor.VendorResult("numpy SGEMM (host BLAS)", [1.0] * 5,
                               notes={"noisy": "its median known to ±9.0%", "disturbed": "x"})
    assert both.unusable == "its median known to ±9.0%; x"


class LoadedHost:
    """Stands in for HostMonitor where every core is loaded: others used 1.9 of 2 cores."""

    def __enter__(self):
        from runner.run.host_state import HostState

        return HostState(other_cpu_cores=1.9, own_cpu_cores=0.1, cpu_cores=2, span_s=0.2,
                         measured_s=0.2)

    def __exit__(self, *exc):
        return None


def test_a_disturbed_baseline_makes_no_headline_and_is_measured_again(monkeypatch):
    """numpy's baseline beside loaded cores: its samples may look steady (as the 67.9% run's
    did), but no % is set against it, the record says why, and the next job measures again."""
    from runner.run.figures import record_vendor
    from runner.run.gpu_state import GpuState
    from runner.run.timing import TimeStats

    monkeypatch.setattr(vendor, "HostMonitor", LoadedHost)
    monkeypatch.setattr(vendor, "_measured", {})
    monkeypatch.setattr(vendor, "_cuda_device_for", lambda backend: None)

    class HostCpu:
        def device_info(self):
            return type("Info", (), {"device_type": "cpu"})()

    backend = HostCpu()
    cfg = compose_config("backend.device_type=cpu", "kernel=matmul_1", "timing.repeats=5",
                         "timing.warmup=1")
    plan = plan_kernel(cfg.kernel, ProblemSize(32, 32, 32))
    problem = make_problem(plan.operation, plan.size, seed=0)
    measured = []
    real = vendor.numpy_sgemm
    monkeypatch.setattr(vendor, "numpy_sgemm", lambda *a: measured.append(1) or real(*a))
    baseline = vendor.vendor_baseline(backend, plan, problem, {}, cfg.timing,
                                      effective_check(cfg), 0)
    assert baseline.notes["disturbed"].startswith("other processes used 1.90 of 2 CPU cores")
    assert baseline.unusable == baseline.notes["disturbed"]
    vendor.vendor_baseline(backend, plan, problem, {}, cfg.timing, effective_check(cfg), 0)
    assert len(measured) == 2, "a disturbed baseline is never reused"

    class Recorder:
        def __init__(self):
            self.tags_seen, self.metrics_seen = {}, {}

        def tags(self, values):
            self.tags_seen.update(values)

        def metrics(self, values):
            self.metrics_seen.update(values)

        def text(self, text, path):
            pass

    recorder, metrics = Recorder(), {}
    record_vendor(recorder, metrics, plan, baseline, GpuState(), TimeStats.of([1.0] * 5),
                  energy=False)
    assert recorder.tags_seen["vendor.unusable"] == baseline.notes["disturbed"]
    assert "vendor.disturbed" not in recorder.tags_seen, "one tag says why: vendor.unusable"
    assert metrics["perf/pct_of_vendor"] is None and metrics["perf/pct_of_reference"] is None
    assert metrics["vendor/time_ms_median"] > 0, "measured and recorded all the same"


# Loaded onto every Python process of the command below (PYTHONPATH): the host's counters read
# by the vendor stage say what they would with every core loaded; nothing else is touched.
LOADED_HOST = '''
import sys

from runner.run import host_state

_exit = host_state.HostMonitor.__exit__


def _every_core_loaded(self, *exc):
    _exit(self, *exc)
    if sys._getframe(1).f_globals.get("__name__") == "runner.run.vendor":
        self.state.other_cpu_cores, self.state.cpu_cores = 1.9, 2


host_state.HostMonitor.__exit__ = _every_core_loaded
'''


def test_a_run_whose_baseline_was_disturbed_prints_no_percent(tmp_path):
    """The command's line and record when numpy's baseline ran beside loaded cores (the
    counters made to say so, the machine left alone): no % on the line nor in the run's name,
    and vendor.unusable says why."""
    import os
    import re
    import subprocess
    import sys

    from mlflow.tracking import MlflowClient

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(LOADED_HOST)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "COLUMNS": "250", "PYTHONPATH": os.pathsep.join(
        [str(site), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "runner", "backend.device_type=cpu",
                           "kernel=matmul_1", "size=32", "timing.warmup=1", "timing.repeats=5",
                           f"tracking.uri={uri}"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(text for text in done.stdout.splitlines() if text.startswith("matmul_1 · "))
    assert "no % of numpy SGEMM (its baseline was disturbed by other work)" in line, line
    assert "% of numpy SGEMM ·" not in line.replace("no % of numpy SGEMM", "")
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("gemmlab").experiment_id])
    assert run.data.tags["vendor.unusable"].startswith(
        "other processes used 1.90 of 2 CPU cores while its ")
    assert "perf/pct_of_vendor" not in run.data.metrics
    assert "perf/pct_of_reference" not in run.data.metrics
    assert run.data.metrics["vendor/time_ms_median"] > 0
    assert "no % of numpy SGEMM" in run.info.run_name, run.info.run_name
    assert not re.search(r"\d%", run.info.run_name), run.info.run_name
