"""Choosing the CPU's OpenCL device: a driver that cannot build kernels is passed over, said why."""

import pytest

import runner.backends.opencl as opencl
from runner.errors import RunError


def _failing(platform_part: str, reason: str):
    real = opencl.build_failure

    def build_failure(device):
        if platform_part in device.platform.name.lower():
            return reason
        return real(device)

    return build_failure


def test_a_cpu_driver_that_cannot_build_is_passed_over_with_its_reason(monkeypatch):
    cpus = [d for p in opencl.cl.get_platforms() for d in p.get_devices()
            if opencl._type_name(d) == "cpu"]
    if len(cpus) < 2:
        pytest.skip("needs two CPU drivers (PoCL and Intel's runtime)")
    first = sorted(cpus, key=lambda d: "portable" not in d.platform.name.lower())[0]
    broken = first.platform.name.lower()[:12]
    monkeypatch.setattr(opencl, "build_failure", _failing(broken, "unknown target CPU 'x'"))
    device, reason = opencl.select_device(None, None, "cpu")
    assert device.platform.name != first.platform.name
    assert "cannot build kernels here (unknown target CPU 'x')" in reason


def test_no_working_cpu_driver_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(opencl, "build_failure", lambda device: "unknown target CPU 'generic'")
    with pytest.raises(RunError, match="no CPU device can build kernels.*intel-opencl-rt"):
        opencl.select_device(None, None, "cpu")
