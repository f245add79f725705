"""The `gemmlab` console script: its own --version, everything else handed to the Hydra app."""

import subprocess
import sys
from pathlib import Path

from runner import __version__

# pip puts console scripts beside the interpreter of the environment it installs into.
GEMMLAB = Path(sys.executable).parent / "gemmlab"


def _gemmlab(*args, cwd):
    assert GEMMLAB.is_file(), f"no {GEMMLAB}: install the project (pip install -e .)"
    return subprocess.run([str(GEMMLAB), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_version_names_gemmlab_and_composes_nothing(tmp_path):
    done = _gemmlab("--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"gemmlab {__version__}\n"
    assert not any(tmp_path.iterdir()), "no Hydra output folder, no MLflow store"


def test_overrides_reach_the_hydra_app_unchanged(tmp_path):
    done = _gemmlab("kernel=matmul_3", "size=48", "timing.repeats=3", "--cfg", "job",
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "name: matmul_3" in done.stdout
    assert "size: 48" in done.stdout and "repeats: 3" in done.stdout
