"""The Makefile's targets run with the checkout's .venv, activated or not."""

import shutil
import subprocess
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
