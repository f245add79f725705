"""Choosing the CPU's OpenCL device: a driver that cannot build kernels is passed over, said why;
and what a driver's compiler says is recorded, never printed as pyopencl's CompilerWarning."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

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


# A kernel whose build makes the compiler say something (clang's #warning, in PoCL and Intel's
# runtime alike), as NVIDIA's compiler does on every build; the hold kernel is replaced by one a
# CPU can build, so both of the backend's builds are taken.
SAYS_SOMETHING = """
import sys
import runner.backends.opencl as opencl
from runner.backends.opencl import OpenCLBackend

said = "#warning gemmlab test: the compiler says something\\n"
source = "// " + sys.argv[1] + "\\n" + said
backend = OpenCLBackend(device_type="cpu")
built = backend.compile(source + "__kernel void k(__global float *x) { x[0] = 1.0f; }",
                        "k.cl", ["k"], {})
print("recorded:", "the compiler says something" in built.log)
opencl._HOLD_SOURCE = source + "__kernel void gemmlab_hold_queue(const ulong ns) { }"
backend._hold_queue()
backend.synchronize()
"""


def test_what_the_compiler_says_is_recorded_and_not_printed():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONWARNINGS")}
    env["PYOPENCL_COMPILER_OUTPUT"] = "1"  # a warning that got through would carry the log
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    # A new source each time: a driver's cache hit might build without saying anything.
    done = subprocess.run([sys.executable, "-c", SAYS_SOMETHING, uuid.uuid4().hex], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "recorded: True"
    assert "CompilerWarning" not in done.stderr, done.stderr
    assert "self._prg.build" not in done.stderr, done.stderr  # the source line warn() shows
    assert "warning generated" not in done.stderr, done.stderr  # clang's count, on stderr


# --- Oclgrind's simulator (issue 58): chosen only by name, recorded as what it is ---

def _simulators() -> list:
    return [d for p in opencl.cl.get_platforms() for d in opencl._devices(p)
            if opencl._is_simulator(d)]


requires_oclgrind = pytest.mark.skipif(not _simulators(),
                                       reason="needs Oclgrind: pip install 'pyopencl[oclgrind]'")


@requires_oclgrind
def test_the_simulator_is_never_a_default_nor_a_gpu():
    """Oclgrind calls its device a GPU (and a CPU and an accelerator): `auto` passes it over,
    a device type never matches it; named, it is chosen, and its type is its own."""
    from runner.errors import Refused

    assert not opencl._is_simulator(opencl.select_device(None, None, "auto")[0])
    assert not opencl._is_simulator(opencl.select_device(None, None, "cpu")[0])
    for kind in ("gpu", "accelerator"):
        real = [d for p in opencl.cl.get_platforms() for d in opencl._devices(p)
                if opencl._type_name(d) == kind]
        if real:
            assert not opencl._is_simulator(opencl.select_device(None, None, kind)[0])
        else:
            with pytest.raises(Refused, match=f"backend.device_type={kind}: no .*Oclgrind: "
                                              r".* \(simulator\)"):
                opencl.select_device(None, None, kind)
    for named in (("oclgrind", None), ("Oclgrind", None), (None, "oclgrind")):
        device, reason = opencl.select_device(*named, "auto")
        assert opencl._is_simulator(device) and "simulator" in reason
    assert opencl.OpenCLBackend(platform="oclgrind").device_info().device_type == "simulator"


@requires_oclgrind
def test_a_run_on_the_simulator_records_its_device_type_as_simulator(tmp_path):
    from test_bad_inputs_cli import gemmlab, runs

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = gemmlab(tmp_path, "backend.platform=oclgrind", "kernel=matmul_1", "size=8",
                   "timing.repeats=3", "timing.warmup=0", f"tracking.uri={uri}", quick=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = runs(uri)
    assert run.data.tags["device.type"] == "simulator"
