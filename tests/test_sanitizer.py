"""compute-sanitizer over every CUDA step (marked `gpu`, skipped without a GPU or the tool):
memcheck (out-of-bounds and misaligned accesses), racecheck (shared-memory hazards) and
synccheck (barriers in divergent code), each step at its default parameters on a small odd
size with several partial tiles in every dimension, and verified. A dropped barrier shows the
racecheck can fail, and that its one line names the source lines of both accesses.

On any machine: the tools' reports (as compute-sanitizer prints them) read into that one line,
and the time limit a run under a tool has (check.sanitizer_timeout_s)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import CONF_DIR, CUDA_SIZE_RULES, KERNEL_NAMES, compose_config, requires_cuda_gpu

from runner.config.validate import validate
from runner.errors import Refused
from runner.job.sanitizers import sanitizer_finding
from runner.job.supervisor import _limits, _timed_out
from runner.run.execute import kernel_source_path

TESTS = Path(__file__).parent
TOOLS = ["memcheck", "racecheck", "synccheck"]


def on_gpu_under_the_tool(test):
    """Marked `gpu`; skipped without an NVIDIA GPU or compute-sanitizer on the PATH."""
    needs_tool = pytest.mark.skipif(shutil.which("compute-sanitizer") is None,
                                    reason="needs compute-sanitizer on the PATH")
    return pytest.mark.gpu(requires_cuda_gpu(needs_tool(test)))


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


@on_gpu_under_the_tool
@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_compute_sanitizer_finds_nothing(name, tool):
    _assert_clean(_sanitize(tool, name), tool)


@on_gpu_under_the_tool
@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("name, index", CUDA_SIZE_RULES)
def test_compute_sanitizer_finds_nothing_in_size_rule_shapes(name, index, tool):
    """The tile shapes size rules choose (matmul_9's 64x32 and 64x64, matmul_12's 128x64, ...)
    are what runs at those sizes compile: the same checks as the defaults."""
    _assert_clean(_sanitize(tool, name, overrides=tuple(CUDA_SIZE_RULES[name, index])), tool)


@on_gpu_under_the_tool
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


@on_gpu_under_the_tool
@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("presplit", [1, 0], ids=["presplit", "splitters"])
def test_compute_sanitizer_finds_nothing_in_matmul_14_clusters(tool, presplit):
    """matmul_14 with CLUSTER=2: each block's producer multicasts half of A's tile (and, with
    PRESPLIT, of its small parts) into both blocks, whose consumers release a stage to both
    producers, over 11 stages a tile and an odd number of tiles along n (the pair's second block
    past N); with PRESPLIT=0 the splitter warps split A's tiles in shared memory instead."""
    _assert_clean(_sanitize(tool, "matmul_14", overrides=("kernel.params.CLUSTER=2",
                                                          f"kernel.params.PRESPLIT={presplit}"),
                            size="300x270x333"), tool)


@on_gpu_under_the_tool
def test_racecheck_reports_a_dropped_barrier_with_the_lines_of_both_accesses(tmp_path):
    """matmul_2 without its second barrier: the next tile overwrites one still being read. The
    one line names the hazard and the source line of each access (NVRTC's -lineinfo): a read
    of a tile in the inner product and a write of the next tile, in the order they ran (a
    write after the read, WAR, or the read of an already overwritten tile, RAW)."""
    scratch = tmp_path / "matmul_2.cu"
    done = _sanitize("racecheck", "matmul_2", "--drop-barrier", "1", "--scratch", str(scratch))
    report = done.stdout + done.stderr
    assert done.returncode != 0 and "hazard" in report.lower(), report[-4000:]
    line = sanitizer_finding("racecheck", report) or ""
    found = re.search(r"(\w+) hazard .*?: (read|write) at matmul_2\.cu:(\d+).*?, then "
                      r"(read|write) at matmul_2\.cu:(\d+)", line)
    assert found, f"{line}\n{report[-4000:]}"
    kind, first, first_line, second, second_line = found.groups()
    assert (kind, first, second) in (("WAR", "read", "write"), ("RAW", "write", "read")), line
    source = scratch.read_text().splitlines()
    lines = {first: source[int(first_line) - 1], second: source[int(second_line) - 1]}
    assert "acc += Asub[ty][k] * Bsub[k][tx]" in lines["read"], (line, lines)
    assert re.search(r"[AB]sub\[ty\]\[tx\] =", lines["write"]), (line, lines)


@on_gpu_under_the_tool
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


# --- through the command line on an NVIDIA GPU: a racy kernel of a user's own ----------------

def _racy_kernel(folder: Path) -> list[str]:
    """race_2, a user's kernel in `folder`: matmul_2 without its second barrier, so the next
    tile overwrites the one still being read. The overrides that find it."""
    (folder / "cuda").mkdir(parents=True)
    (folder / "conf" / "kernel").mkdir(parents=True)
    source = kernel_source_path("cuda", "matmul_2.cu").read_text()
    last_barrier = source.rindex("__syncthreads();")
    source = source[:last_barrier] + ";" + source[last_barrier + len("__syncthreads();"):]
    (folder / "cuda" / "race_2.cu").write_text(source.replace("matmul_2", "race_2"))
    spec = yaml.safe_load((CONF_DIR / "kernel" / "matmul_2.yaml").read_text())
    spec.update(name="race_2", summary="matmul_2 without its second barrier (a test fixture).",
                sources={"cuda": "race_2.cu"})
    spec["launches"][0]["entry"] = "race_2"
    (folder / "conf" / "kernel" / "race_2.yaml").write_text(yaml.safe_dump(spec))
    return ["backend=cuda", "kernel=race_2", "check.sanitizer=racecheck",
            f"kernel_dirs=[{folder}]", f"hydra.searchpath=[file://{folder / 'conf'}]",
            f"tracking.uri=sqlite:///{folder / 'mlflow.db'}"]


def _assert_names_the_racy_lines(line: str, folder: Path) -> None:
    """A read in the inner product and a write of the next tile, each at its own line."""
    source = (folder / "cuda" / "race_2.cu").read_text().splitlines()
    accesses = dict((what, source[int(number) - 1]) for what, number in
                    re.findall(r"(read|write) at race_2\.cu:(\d+)", line))
    assert "acc += Asub[ty][k] * Bsub[k][tx]" in accesses.get("read", ""), line
    assert re.search(r"[AB]sub\[ty\]\[tx\] =", accesses.get("write", "")), line


@on_gpu_under_the_tool
def test_racecheck_through_the_command_line_names_both_lines(tmp_path):
    from test_bad_inputs_cli import gemmlab, one_error_line

    done = gemmlab(tmp_path, *_racy_kernel(tmp_path), "m=70", "n=67", "k=50", quick=False,
                   timeout=600)
    # "WAR hazard on …", or on an H100 with CUDA 13 "WAR hazard (Warp Level Programming) on …"
    line = one_error_line(done, "racecheck found errors in race_2 at 70x67x50", " hazard ")
    _assert_names_the_racy_lines(line, tmp_path)


@on_gpu_under_the_tool
def test_racecheck_at_256_finds_the_lines_or_says_the_tool_ran_out_of_time(tmp_path):
    """Issue 38: racecheck on a racy kernel at 256^3 was stopped by timing.timeout_s (60 s) as
    a kernel that "did not return". Under a tool the limit is check.sanitizer_timeout_s, so
    timing.timeout_s=1 stops nothing; the run either ends with the hazard's lines or says the
    tool ran out of time, and how to go on. 20 s keeps the test short."""
    from test_bad_inputs_cli import gemmlab, one_error_line

    done = gemmlab(tmp_path, *_racy_kernel(tmp_path), "size=256", "timing.timeout_s=1",
                   "check.sanitizer_timeout_s=20", quick=False, timeout=600)
    assert "the kernel did not return" not in done.stderr, done.stderr[-3000:]
    if "racecheck found errors" in done.stderr:
        line = one_error_line(done, "racecheck found errors in race_2 at 256x256x256")
        _assert_names_the_racy_lines(line, tmp_path)
    else:
        one_error_line(done, "race_2 under racecheck did not finish within 20 s at 256x256x256:",
                       "the tool slows a kernel by orders of magnitude",
                       "try a smaller size or raise check.sanitizer_timeout_s")


# --- on any machine: reports as compute-sanitizer writes them, read into one line ------------

# `--racecheck-report all` (what a run asks for): each hazard, then each pair of instructions.
RACECHECK_ALL = """\
========= COMPUTE-SANITIZER
========= Error: Potential WAR hazard detected at __shared__ 0x580 in block (0,2,0) :
=========     Read Thread (3,1,0) at race_2+0x4d0 in race_2.cu:31
=========     Write Thread (3,0,0) at race_2+0x2b0 in race_2.cu:27
=========     Current Value : 0, Incoming Value : 1065353216
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f2e1f] in libcuda.so.1
=========         Host Frame: [0x15a61] in runtime.cpython-311-x86_64-linux-gnu.so
=========
========= Error: Potential WAR hazard detected at __shared__ 0x581 in block (0,2,0) :
=========     Read Thread (3,1,0) at race_2+0x4d0 in race_2.cu:31
=========     Write Thread (3,0,0) at race_2+0x2b0 in race_2.cu:27
=========
========= Error: Potential RAW hazard detected at __shared__ 0x1588 in block (1,2,0) :
=========     Write Thread (7,3,0) at race_2+0x2c0 in race_2.cu:28
=========     Read Thread (2,3,0) at race_2+0x4e0 in race_2.cu:31
=========     Current Value : 1065353216, Incoming Value : 0
=========
========= Error: Race reported between Read access at race_2+0x4d0 in race_2.cu:31
=========     and Write access at race_2+0x2b0 in race_2.cu:27 [4096 hazards]
=========
========= Error: Race reported between Write access at race_2+0x2c0 in race_2.cu:28
=========     and Read access at race_2+0x4e0 in race_2.cu:31 [1024 hazards]
=========
========= RACECHECK SUMMARY: 102 hazards displayed (102 errors, 0 warnings)
"""


def test_a_racecheck_hazard_is_one_line_with_its_kind_and_both_source_lines():
    assert sanitizer_finding("racecheck", RACECHECK_ALL, "race_2.cu") == (
        "WAR hazard on __shared__ 0x580 in block (0,2,0): read at race_2.cu:31 by thread "
        "(3,1,0), then write at race_2.cu:27 by thread (3,0,0) (102 hazards displayed; 1 more "
        "pair of lines in the report)")


def test_racecheck_of_older_releases_and_of_code_without_line_info():
    """cuda-memcheck's layout ("WARN:", "at 0x170 in ./race.cu:4:test(int*, int*)"), and code
    built without -lineinfo, where an access is only an offset in its function."""
    legacy = """\
========= CUDA-MEMCHECK
========= WARN:(Warp Level Programming) Potential WAR hazard detected at __shared__ 0x3 in block (0, 0, 0) :
=========     Read Thread (31, 0, 0) at 0x00000170 in ./race.cu:4:test(int*, int*)
=========     Write Thread (0, 0, 0) at 0x000001a8 in ./race.cu:5:test(int*, int*)
=========     Current Value : 0, Incoming Value : 0
=========
========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)
"""
    assert sanitizer_finding("racecheck", legacy) == (
        "WAR hazard (Warp Level Programming) on __shared__ 0x3 in block (0, 0, 0): read at "
        "./race.cu:4 by thread (31, 0, 0), then write at ./race.cu:5 by thread (0, 0, 0) "
        "(1 hazard displayed)")
    no_lines = """\
========= Error: Potential WAR hazard detected at __shared__ 0x410 in block (11,0,0) :
=========     Read Thread (127,0,0) at pre_block_prefix_sum+0x860
=========     Write Thread (0,0,0) at pre_block_prefix_sum+0x9d0
=========     Current Value : 0, Incoming Value : 181
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
    assert sanitizer_finding("racecheck", no_lines).startswith(
        "WAR hazard on __shared__ 0x410 in block (11,0,0): read at pre_block_prefix_sum+0x860 "
        "by thread (127,0,0), then write at pre_block_prefix_sum+0x9d0 by thread (0,0,0)")


def test_racecheck_analysis_report_names_both_lines():
    """`--racecheck-report analysis`: one entry per pair of instructions, no hazard kind."""
    analysis = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Read access at convolution+0x6360 in /home/me/convolution.cu:123:convolution(float const*, int)
=========     and Write access at convolution+0x1fe0 in /home/me/convolution.cu:63:convolution(float const*, int) [1088 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
    assert sanitizer_finding("racecheck", analysis) == (
        "race between a read at /home/me/convolution.cu:123 and a write at "
        "/home/me/convolution.cu:63 (1 hazard displayed)")


def test_clean_reports_are_no_finding_and_memcheck_keeps_its_line():
    assert sanitizer_finding("racecheck", "========= COMPUTE-SANITIZER\npassed=True\n"
                             "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 "
                             "warnings)\n") is None
    assert sanitizer_finding("memcheck", "========= COMPUTE-SANITIZER\n"
                             "========= ERROR SUMMARY: 0 errors\n") is None
    memcheck = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at oob_1+0x1b0 in oob_1.cu:17
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x7f3c5e000190 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3c5e000000 of size 400 bytes
=========
========= ERROR SUMMARY: 100 errors
"""
    assert sanitizer_finding("memcheck", memcheck) == (
        "Invalid __global__ write of size 4 bytes at oob_1+0x1b0 in oob_1.cu:17 (100 errors)")


def test_a_report_cut_short_by_the_time_limit_still_names_what_it_found():
    """A tool stopped at check.sanitizer_timeout_s writes no summary: a finished run's reading
    (the summary says whether it is clean) finds nothing, a stopped one's the first hazard."""
    cut = RACECHECK_ALL[:RACECHECK_ALL.index("========= Error: Potential RAW")]
    assert sanitizer_finding("racecheck", cut) is None
    assert sanitizer_finding("racecheck", cut, partial=True) == (
        "WAR hazard on __shared__ 0x580 in block (0,2,0): read at race_2.cu:31 by thread "
        "(3,1,0), then write at race_2.cu:27 by thread (3,0,0)")
    assert sanitizer_finding("racecheck", "========= COMPUTE-SANITIZER\n", partial=True) is None


# --- on any machine: the time limit under a tool ---------------------------------------------

def test_a_run_under_a_tool_has_its_own_time_limit_and_says_so():
    cfg = compose_config("backend=cuda", "check.sanitizer=racecheck", "timing.timeout_s=60",
                         "check.sanitizer_timeout_s=900")
    limits = _limits(cfg)
    assert limits["check"] == limits["time"] == limits["vendor"] == 900.0
    assert limits["compile"] == cfg.timing.compile_timeout_s
    assert _limits(compose_config("timing.timeout_s=60"))["check"] == 60.0
    assert compose_config().check.sanitizer_timeout_s == 600.0  # minutes by default
    assert _timed_out("check", 900.0, cfg, "256x256x256") == (
        "matmul_2 under racecheck did not finish within 900 s at 256x256x256: the tool slows a "
        "kernel by orders of magnitude (a kernel that never returns ends here too); try a "
        "smaller size or raise check.sanitizer_timeout_s")
    assert "(timing.timeout_s)" in _timed_out("check", 60.0, compose_config(), "256x256x256")


@pytest.mark.parametrize("value", ["0", "-5", "nan", "100000"])
def test_a_sanitizer_time_limit_out_of_range_is_refused(value):
    with pytest.raises(Refused, match=r"check\.sanitizer_timeout_s=\S+ is out of range "
                                      r"\(allowed: \(0, 86400\]"):
        validate(compose_config(f"check.sanitizer_timeout_s={value}"))
    validate(compose_config("check.sanitizer_timeout_s=0.5"))


def test_nvrtc_compiles_with_line_info_for_the_sanitizers_lines():
    """compute-sanitizer names "file.cu:line" only for code with line info (-lineinfo)."""
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from runner.backends.nvrtc import compile_cuda

    source = kernel_source_path("cuda", "matmul_2.cu").read_text()
    output = compile_cuda(source, "matmul_2.cu", {"TS": 32}, 90)
    assert "-lineinfo" in output.options
    assert b".nv_debug_line_sass" in output.cubin
