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


def _probe(imports: str, tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_CACHE_DISABLE", "OCL_ICD_VENDORS")}
    env["TMPDIR"] = str(tmp)  # where registering Intel's runtime would write its ICD folder
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
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
