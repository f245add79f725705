"""Local-memory data races, found by the Oclgrind simulator: every kernel at a small odd size with
several tiles in every dimension, at its defaults. Skipped where Oclgrind is not installed.
The tensor-core steps (NVIDIA inline PTX, which a simulator cannot run) are checked by
compute-sanitizer's racecheck on the GPU instead: tests/test_sanitizer.py."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PORTABLE_KERNELS

TESTS = Path(__file__).parent


def _oclgrind_installed() -> bool:
    try:
        import pyopencl as cl

        return any("oclgrind" in p.name.lower() for p in cl.get_platforms())
    except Exception:
        return False


pytestmark = pytest.mark.skipif(not _oclgrind_installed(),
                                reason="needs Oclgrind: pip install 'pyopencl[oclgrind]'")


def _simulate(name: str, size: str, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OCLGRIND_DATA_RACES": "1", "PYTHONPATH": os.pathsep.join(
        [str(TESTS), os.environ.get("PYTHONPATH", "")])}  # the runner under test, not another
    return subprocess.run([sys.executable, str(TESTS / "race_check.py"), name, size, *extra],
                          env=env, capture_output=True, text=True, timeout=600)


def _size(name: str) -> str:
    # Several tiles along every dimension at the defaults, none of them full.
    return "70x67x50" if name.startswith("matmul_") else "70x67x1"


# Oclgrind offers 32 KiB of local memory; matmul_4's default tile needs 33 KiB.
FITS_OCLGRIND = {"matmul_4": ["kernel.params.TS=32"]}


@pytest.mark.parametrize("name", PORTABLE_KERNELS)
def test_no_data_races_and_correct_under_oclgrind(name):
    done = _simulate(name, _size(name), *FITS_OCLGRIND.get(name, []))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "passed=True" in done.stdout
    assert "race" not in done.stderr.lower(), done.stderr
    assert "invalid" not in done.stderr.lower(), done.stderr


def test_transpose_5_ragged_interior_tiles_have_no_races():
    """70x67 at TILE=64 has no tile that is neither first nor last in its dst rows, the ragged
    path's unguarded store; 140x133 at TILE=32 has three per column of tiles."""
    done = _simulate("transpose_5", "140x133x1", "kernel.params.TILE=32", "kernel.params.STRIDE=4")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "passed=True" in done.stdout
    assert "race" not in done.stderr.lower(), done.stderr


IN_PLACE_128X32 = ["kernel.params.A_PREPASS=0", "kernel.params.BM=128", "kernel.params.BN=32",
                   "kernel.params.WM=64", "kernel.params.WN=32", "kernel.params.TM=8",
                   "kernel.params.TN=8"]


@pytest.mark.parametrize("overrides", [["kernel.params.A_PREPASS=0"], IN_PLACE_128X32,
                                       ["kernel.params.K_UNROLL=4"]],
                         ids=["a-in-place", "a-in-place-128x32", "k-unroll-4"])
def test_matmul_9_variants_have_no_races(overrides):
    """A_PREPASS = 0: every work-item stores A's elements transposed and swizzled into the
    stage the others read; K_UNROLL = 4: the barrier sits in the last trip of a loop. 140x67x50
    has two tile rows, the second ragged, and a ragged K."""
    done = _simulate("matmul_9", "140x67x50", *overrides)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "passed=True" in done.stdout
    assert "race" not in done.stderr.lower(), done.stderr
    assert "invalid" not in done.stderr.lower(), done.stderr


def test_a_missing_barrier_is_reported(tmp_path):
    """The check can fail: drop matmul_2's second barrier (the one before the tiles are
    overwritten) and Oclgrind reports the race."""
    done = _simulate("matmul_2", "70x67x50", "--drop-barrier", "1",
                     "--scratch", str(tmp_path / "matmul_2.cl"))
    assert "race" in done.stderr.lower(), done.stdout + done.stderr
