"""compute-sanitizer over every CUDA step (marked `gpu`, skipped without a GPU or the tool):
memcheck (out-of-bounds and misaligned accesses), racecheck (shared-memory hazards) and
synccheck (barriers in divergent code), each step at its default parameters on a small odd
size with several partial tiles in every dimension, and verified. A dropped barrier shows the
racecheck can fail."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CUDA_SIZE_RULES, KERNEL_NAMES, requires_cuda_gpu

TESTS = Path(__file__).parent
pytestmark = [pytest.mark.gpu, requires_cuda_gpu,
              pytest.mark.skipif(shutil.which("compute-sanitizer") is None,
                                 reason="needs compute-sanitizer on the PATH")]
TOOLS = ["memcheck", "racecheck", "synccheck"]


def _sanitize(tool: str, name: str, *extra: str, overrides: tuple[str, ...] = (),
              size: str = "") -> subprocess.CompletedProcess:
    size = size or ("70x67x50" if name.startswith("matmul_") else "70x67x1")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        ["compute-sanitizer", "--tool", tool, "--error-exitcode", "9",
         *(["--racecheck-report", "all"] if tool == "racecheck" else []),
         sys.executable, str(TESTS / "race_check.py"), "--backend", "cuda", name, size, *overrides,
         *extra],
        env=env, capture_output=True, text=True, timeout=600)


def _assert_clean(done: subprocess.CompletedProcess, tool: str) -> None:
    """The run passed verification and the tool found nothing: memcheck and synccheck end with
    "ERROR SUMMARY", racecheck with its own summary line."""
    report = done.stdout + done.stderr
    assert done.returncode == 0 and "passed=True" in done.stdout, report[-4000:]
    clean = ("RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
             if tool == "racecheck" else "ERROR SUMMARY: 0 errors")
    assert clean in report, report[-4000:]


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_compute_sanitizer_finds_nothing(name, tool):
    _assert_clean(_sanitize(tool, name), tool)


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("name, index", CUDA_SIZE_RULES)
def test_compute_sanitizer_finds_nothing_in_size_rule_shapes(name, index, tool):
    """The tile shapes size rules choose (matmul_9's 128x32 and 64x64, matmul_12's 128x64, ...)
    are what runs at those sizes compile: the same checks as the defaults."""
    _assert_clean(_sanitize(tool, name, overrides=tuple(CUDA_SIZE_RULES[name, index])), tool)


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("overrides", [("kernel.params.A_PREPASS=0",),
                                       ("kernel.params.A_PREPASS=1",),
                                       ("kernel.params.K_UNROLL=4",)],
                         ids=["a-in-place", "a-pre-pass", "k-unroll-4"])
def test_compute_sanitizer_finds_nothing_in_matmul_9_variants(overrides, tool):
    """matmul_9 with A transposed by its pre-pass and with A read in place (the transposing,
    swizzled 4-byte copies), whichever is not the default included; and with the steps of a
    tile in a loop of 4-step chunks, where the barrier sits in the last trip's branch."""
    _assert_clean(_sanitize(tool, "matmul_9", overrides=overrides), tool)


@pytest.mark.parametrize("tool", TOOLS)
def test_compute_sanitizer_finds_nothing_in_matmul_14_clusters(tool):
    """matmul_14 with CLUSTER=2: each block's producer multicasts half of A's tile into both
    blocks, whose consumers release a stage to both producers, over 11 stages a tile and an odd
    number of tiles along n (the pair's second block past N)."""
    _assert_clean(_sanitize(tool, "matmul_14", overrides=("kernel.params.CLUSTER=2",),
                            size="300x270x333"), tool)


def test_racecheck_reports_a_dropped_barrier(tmp_path):
    """matmul_2 without its second barrier: the next tile overwrites one still being read."""
    done = _sanitize("racecheck", "matmul_2", "--drop-barrier", "1",
                     "--scratch", str(tmp_path / "matmul_2.cu"))
    report = done.stdout + done.stderr
    assert done.returncode != 0 and "hazard" in report.lower(), report[-4000:]


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
@pytest.mark.parametrize("size", ["203x261x1", "136x261x1"])
def test_compute_sanitizer_transpose_5_ragged_interior_stays_inside_its_buffers(size, tool):
    """transpose_5's ragged interior tiles read aligned float4s that run up to 3 floats past a
    row's tile (into the next row: never from the last tile row) and gather float4 stores from
    the tile: with 64x64 tiles (no size rule) these shapes have interior tiles beside edge
    tiles of every kind (right edge, last tile row - of 8 rows at 136 -, first and last in
    their dst rows), with the 8-row halo (203 rows) and without it (136). memcheck sees reads
    past an allocation, which CuPy rounds up, so it guards the edges more than the interior."""
    done = _sanitize(tool, "transpose_5", size=size,
                     overrides=("kernel.params.TILE=64", "kernel.params.STRIDE=8"))
    report = done.stdout + done.stderr
    assert done.returncode == 0 and "passed=True" in done.stdout, report[-4000:]
    clean = ("RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
             if tool == "racecheck" else "ERROR SUMMARY: 0 errors")
    assert clean in report, report[-4000:]
