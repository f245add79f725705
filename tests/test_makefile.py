"""The Makefile: `make` alone lists the targets; they run with the checkout's .venv, activated or
not; `make test-gpu` fails, saying why, where there is no GPU."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

MAKEFILE = Path(__file__).resolve().parent.parent / "Makefile"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def _dry_run(folder: Path, *args: str) -> str:
    shutil.copy(MAKEFILE, folder / "Makefile")
    env = {"PATH": "/usr/bin:/bin"}  # no PYTHON from the caller's environment
    done = subprocess.run(["make", "-n", *args], cwd=folder, capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_run_uses_the_checkouts_venv_when_there_is_one(tmp_path):
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").touch()
    assert _dry_run(tmp_path, "run", "ARGS=size=64").strip() == \
        ".venv/bin/python -m runner size=64"


def test_make_run_without_a_venv_uses_python3_and_python_can_be_given(tmp_path):
    assert _dry_run(tmp_path, "run").strip() == "python3 -m runner"
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").touch()
    assert _dry_run(tmp_path, "test", "PYTHON=/opt/py/bin/python").startswith(
        "/opt/py/bin/python -m pytest")


def test_make_alone_lists_every_target_with_what_it_does(tmp_path):
    shutil.copy(MAKEFILE, tmp_path / "Makefile")
    done = subprocess.run(["make"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "pip install" not in done.stdout  # the default is the list, not the install
    listed = {line.split()[0] for line in done.stdout.splitlines()[1:]}
    phony = next(line for line in MAKEFILE.read_text().splitlines()
                 if line.startswith(".PHONY:"))
    assert listed == set(phony.split()[1:])
    assert "  test-gpu          only the GPU-marked tests" in done.stdout


def test_make_test_gpu_without_a_gpu_says_so_in_one_line_and_fails(tmp_path):
    """Not 'N skipped, M deselected' and exit 0: no GPU is an error for this target."""
    shutil.copy(MAKEFILE, tmp_path / "Makefile")
    (tmp_path / "no-vendors").mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "CUDA_VISIBLE_DEVICES": "",  # CuPy sees no GPU, on a GPU machine too
           "OCL_ICD_VENDORS": str(tmp_path / "no-vendors")}  # nor does the OpenCL loader
    done = subprocess.run(["make", "test-gpu", f"PYTHON={sys.executable}"], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0
    assert "pytest" not in done.stdout, done.stdout  # stopped before pytest started
    (said,) = [line for line in done.stderr.splitlines() if not line.startswith("make:")]
    assert said.startswith("make test-gpu: no NVIDIA GPU here"), done.stderr
