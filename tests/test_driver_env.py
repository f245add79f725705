"""`import runner` leaves the environment and /tmp alone; the drivers' environment is set where
a backend is imported, before pyopencl asks the ICD loader for platforms."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import json, os, sys
before = dict(os.environ)
{imports}
changed = sorted(k for k in set(os.environ) | set(before) if os.environ.get(k) != before.get(k))
print(json.dumps({{"changed": changed, "pyopencl": "pyopencl" in sys.modules}}))
"""


def _with_checkout(env: dict) -> str:
    """PYTHONPATH with this checkout first and whatever the test's own process had after it
    (a host whose packages come through PYTHONPATH, as the lent GPU hosts' wheels do)."""
    root = str(Path(__file__).resolve().parent.parent)
    return os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])


def _probe(imports: str, tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_CACHE_DISABLE", "OCL_ICD_VENDORS")}
    env["TMPDIR"] = str(tmp)  # where registering Intel's runtime would write its ICD folder
    env["PYTHONPATH"] = _with_checkout(env)
    done = subprocess.run([sys.executable, "-c", PROBE.format(imports=imports)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("imports", [
    "import runner",
    "import runner.app, runner.cli, runner.results.report, runner.sweep.callback",
])
def test_importing_the_package_sets_nothing_and_writes_nothing(tmp_path, imports):
    found = _probe(imports, tmp_path)
    assert found["changed"] == [] and not found["pyopencl"]
    assert list(tmp_path.iterdir()) == []


def test_the_opencl_backend_prepares_the_drivers_before_pyopencl(tmp_path):
    from runner.backends.cpu_runtimes import intel_cpu_library

    found = _probe("import runner.backends.opencl", tmp_path)
    assert found["pyopencl"] and "CUDA_CACHE_DISABLE" in found["changed"]
    if intel_cpu_library() is not None:  # Intel's CPU runtime from pip: registered
        assert "OCL_ICD_VENDORS" in found["changed"]
        assert any(tmp_path.glob("gemmlab-ocl-vendors-*/*/gemmlab-intel-cpu.icd"))


def test_the_cuda_backend_disables_the_drivers_kernel_cache(tmp_path):
    found = _probe("import runner.backends.cuda", tmp_path)
    assert "CUDA_CACHE_DISABLE" in found["changed"] and not found["pyopencl"]


def test_every_pyopencl_import_in_runner_follows_the_drivers_preparation():
    """pyopencl is imported at the top of runner/backends/opencl.py, after driver_env.prepare(),
    or inside a function that receives an OpenCL backend already made (so already prepared)."""
    root = Path(__file__).resolve().parent.parent / "runner"
    for path in root.rglob("*.py"):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if line.strip().startswith(("import pyopencl", "from pyopencl")):
                if not line.startswith(" "):  # a module-level import
                    assert path.name == "opencl.py", f"{path}:{number + 1}"
                    assert any("driver_env.prepare()" in earlier for earlier in lines[:number])


def test_an_nvrtc_compile_turns_nvrtcs_own_cache_off_first(tmp_path):
    """A compile-pool process imports no backend; its NVRTC (CUDA 12.9 on) would otherwise keep
    outputs in the driver's cache, whose hits come back without the ptxas report."""
    found = _probe("from runner.backends.nvrtc import compile_cuda\n"
                   "compile_cuda('extern \"C\" __global__ void k(float *x) { x[0] = 1; }', "
                   "'k.cu', {}, 90, None)", tmp_path)
    assert "CUDA_CACHE_DISABLE" in found["changed"] and not found["pyopencl"]


def test_the_same_program_compiled_again_in_a_new_process_still_reports_its_resources(tmp_path):
    """Two processes, gemmlab's compile cache off, the driver's cache in a folder of the test's:
    both logs carry ptxas' report (NVRTC 13.0 with its cache on returned an empty log the
    second time, and the run's record lost its spills)."""
    compile_once = (
        "import os, json\n"
        "from runner.backends.nvrtc import compile_cuda\n"
        "out = compile_cuda(open('kernels/cuda/matmul_5.cu').read(), 'matmul_5.cu', "
        "{}, 90, None, ('kernels/cuda',))\n"
        "print(json.dumps({'report': 'registers' in out.log}))\n")
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k != "CUDA_CACHE_DISABLE"}
    env.update(GEMMLAB_COMPILE_CACHE="off", CUDA_CACHE_PATH=str(tmp_path / "nv"),
               PYTHONPATH=_with_checkout(env))
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", compile_once], env=env, cwd=root,
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout.strip().splitlines()[-1]) == {"report": True}


def test_a_build_without_ptxas_report_says_so_in_its_log(monkeypatch):
    """Where NVRTC answers from its own cache anyway (a user's CUDA_CACHE_DISABLE=0), the
    compile log says why the record has no spills instead of leaving them out silently."""
    from cupy_backends.cuda.libs import nvrtc as binding

    from runner.backends.nvrtc import _nvrtc_compile

    monkeypatch.setattr(binding, "getProgramLog", lambda program: "")
    output = _nvrtc_compile('extern "C" __global__ void k(float *x) { x[0] = 1; }', "k.cu",
                            (), 90, None)
    assert "NVRTC printed no ptxas report" in output.log and output.cubin
