"""A kernel that does not compile shows why: the compiler's first error with the user's file name
and line in the one error line, the whole log on the error (for the failed run's record), and no
library warning or compiler chatter in the terminal. On every OpenCL runtime installed here and
on NVRTC (which compiles without a GPU)."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_bad_inputs_cli import gemmlab, one_error_line

from runner.backends.build_log import compile_errors, first_error
from runner.errors import BuildError

# Line 15, column 33 of syn_1.cl: `acc += A[row * K + k] * undefined_thing;`
SYN_CL = textwrap.dedent("""\
    // syn_1: a naive SGEMM with a name that is never declared (a user's typo).

    #ifndef TS
    #define TS 16
    #endif

    __kernel void syn_1(const int M, const int N, const int K,
                        const __global float* A, const __global float* B, __global float* C) {
        const int col = get_global_id(0);
        const int row = get_global_id(1);
        if (row >= M || col >= N) return;
        float acc = 0.0f;
        for (int k = 0; k < K; k++) {
            acc += A[row * K + k] * B[k * N + col];
            acc += A[row * K + k] * undefined_thing;
        }
        C[row * N + col] = acc;
    }
    """)

SYN_CU = textwrap.dedent("""\
    // syn_1: the same typo in CUDA.
    extern "C" __global__ void syn_1(const int M, const int N, const int K, const float* A,
                                     const float* B, float* C) {
        int unused;
        C[0] = A[0] * undefined_thing;
    }
    """)

SYN_YAML = textwrap.dedent("""\
    name: syn_1
    operation: sgemm
    summary: A user's kernel with a typo in it.
    sources: {opencl: syn_1.cl, cuda: syn_1.cu}
    params: {TS: 16}
    allowed: {TS: [4, 8, 16]}
    launches:
      - entry: syn_1
        args: [M, N, K, A, B, C]
        local: [TS, TS]
        groups: ["ceil_div(N, TS)", "ceil_div(M, TS)"]
    edges: guarded
    work:
      flops: 2 * M * N * K
      bytes: 4 * (M * K + K * N + M * N)
    """)

EXPECTED = "syn_1.cl:15:"  # clang's column follows; the words name the identifier


def _platforms() -> list[str]:
    import pyopencl as cl

    import runner  # noqa: F401  registers Intel's pip-installed CPU runtime first

    return [p.name for p in cl.get_platforms()]


def _cpu_platforms() -> list[str]:
    wanted = {"Portable Computing Language": "Portable", "Intel(R) OpenCL": "Intel"}
    return [wanted[name] for name in _platforms() if name in wanted]


@pytest.fixture(scope="module")
def user_folders(tmp_path_factory) -> tuple[Path, Path]:
    """A user's kernel and config folders, outside the package, as docs/adding-a-kernel.md says."""
    home = tmp_path_factory.mktemp("user")
    (home / "my_kernels" / "opencl").mkdir(parents=True)
    (home / "my_kernels" / "cuda").mkdir(parents=True)
    (home / "my_conf" / "kernel").mkdir(parents=True)
    (home / "my_kernels" / "opencl" / "syn_1.cl").write_text(SYN_CL)
    (home / "my_kernels" / "cuda" / "syn_1.cu").write_text(SYN_CU)
    (home / "my_conf" / "kernel" / "syn_1.yaml").write_text(SYN_YAML)
    return home / "my_kernels", home / "my_conf"


@pytest.mark.parametrize("platform", [None] + _cpu_platforms(),
                         ids=lambda p: f"platform={p}" if p else "default CPU")
def test_a_kernel_that_does_not_compile_names_file_line_and_name(user_folders, tmp_path,
                                                                 platform):
    kernels, conf = user_folders
    chosen = [f"backend.platform={platform}"] if platform else []
    done = gemmlab(tmp_path, f"kernel_dirs=[{kernels}]", f"hydra.searchpath=[file://{conf}]",
                   "kernel=syn_1", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", *chosen)
    line = one_error_line(done, "OpenCL build of syn_1.cl failed: ", EXPECTED,
                          "error: use of undeclared identifier 'undefined_thing'")
    assert len(line) < 300, line
    assert "input.cl" not in line and "BUILD_PROGRAM_FAILURE" not in line
    output = done.stdout + done.stderr
    assert "Warning" not in output, output  # pyopencl's UserWarning / CompilerWarning
    assert "error generated" not in output, output  # clang's own count, printed on stderr


@pytest.mark.parametrize("platform", ["Portable", "Intel", "Oclgrind"])
def test_every_opencl_runtime_gives_the_first_error_and_the_whole_log(platform, capfd):
    if not any(platform.lower() in name.lower() for name in _platforms()):
        pytest.skip(f"no {platform} OpenCL platform here")
    from runner.backends.opencl import OpenCLBackend

    backend = OpenCLBackend(platform, None, "auto")
    broken = SYN_CL.replace("B[k * N + col];", "B[k * N + col] + other_thing;")
    with pytest.raises(BuildError) as raised:
        backend.compile(broken, "syn_1.cl", ["syn_1"], {"TS": 16})
    reason = str(raised.value)
    assert reason.startswith("OpenCL build of syn_1.cl failed: syn_1.cl:14:")
    assert "'other_thing'" in reason and "(and 1 more error: see compile_log.txt)" in reason
    log = raised.value.artifacts()["compile_log.txt"]
    assert "other_thing" in log and "undefined_thing" in log and "-DTS=16" in log
    printed = capfd.readouterr()
    assert "error" not in printed.err and "Warning" not in printed.err, printed.err


def test_nvrtc_gives_the_first_error_and_the_whole_log():
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from runner.backends.nvrtc import compile_cuda

    with pytest.raises(BuildError) as raised:
        compile_cuda(SYN_CU, "syn_1.cu", {}, 90)
    assert str(raised.value) == ('NVRTC compile of syn_1.cu failed: syn_1.cu:5: error: '
                                 'identifier "undefined_thing" is undefined')
    log = raised.value.artifacts()["compile_log.txt"]
    assert "-arch=sm_90a" in log and 'warning #177-D: variable "unused"' in log


LOGS = [  # (compiler, a log line, what the user sees)
    ("Oclgrind", "input.cl:3:12: error: use of undeclared identifier 'x'",
     "syn_1.cl:3:12: error: use of undeclared identifier 'x'"),
    ("Intel", "1:3:12: error: use of undeclared identifier 'x'",
     "syn_1.cl:3:12: error: use of undeclared identifier 'x'"),
    ("NVIDIA OpenCL", "<kernel>:3:12: error: use of undeclared identifier 'x'",
     "syn_1.cl:3:12: error: use of undeclared identifier 'x'"),
    ("PoCL", "error: /root/.cache/pocl/kcache/tempfile_9Aqp2j.cl:3:12: use of undeclared "
             "identifier 'x'", "syn_1.cl:3:12: error: use of undeclared identifier 'x'"),
    ("NVRTC", 'syn_1.cl(3): error: identifier "x" is undefined',
     'syn_1.cl:3: error: identifier "x" is undefined'),
    ("a header", "tiles.h:7:1: error: unknown type name 'flaot'",
     "tiles.h:7:1: error: unknown type name 'flaot'"),
]


@pytest.mark.parametrize("compiler, log, shown", LOGS, ids=[case[0] for case in LOGS])
def test_each_compilers_error_line_is_read(compiler, log, shown):
    assert compile_errors(f"Compilation started\n{log}\n    3 | x\n", "syn_1.cl") == [shown]


def test_a_log_without_a_recognised_error_gives_its_error_line_or_the_fallback():
    assert first_error("ptxas fatal error: out of memory\n", "a.cl") == \
        "ptxas fatal error: out of memory"
    assert first_error("", "a.cl", fallback="clBuildProgram failed") == "clBuildProgram failed"


def test_no_source_copy_is_left_in_the_temporary_folder(tmp_path):
    """pyopencl saves the source of every failed cached build to the temporary folder."""
    script = ("import runner, tempfile; from runner.backends.opencl import OpenCLBackend\n"
              "from runner.errors import BuildError\n"
              "b = OpenCLBackend('Intel', None, 'cpu')\n"
              "try: b.compile('__kernel void k() { x; }', 'syn_1.cl', ['k'], {})\n"
              "except BuildError: pass\n")
    if "Intel(R) OpenCL" not in _platforms():
        pytest.skip("Intel's CPU runtime (pyopencl's cached build path) is not installed")
    import os

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not list(tmp_path.glob("*.cl")), list(tmp_path.iterdir())


def test_the_failed_run_records_the_whole_build_log(user_folders, tmp_path):
    from mlflow.tracking import MlflowClient

    kernels, conf = user_folders
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = gemmlab(tmp_path, f"kernel_dirs=[{kernels}]", f"hydra.searchpath=[file://{conf}]",
                   "kernel=syn_1", f"tracking.uri={uri}")
    one_error_line(done, "OpenCL build of syn_1.cl failed: ", EXPECTED)
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("gemmlab").experiment_id])
    assert run.info.status == "FAILED"
    log = Path(client.download_artifacts(run.info.run_id, "compile_log.txt", str(tmp_path)))
    assert "undefined_thing" in log.read_text()
