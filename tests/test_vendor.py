"""The vendor baseline's cache: one library measurement per problem, shared by the steps that
differ in precision or tolerance; cuBLAS in TF32 mode only for a reduced-precision step."""

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
