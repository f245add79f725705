"""Kernels brought from elsewhere, unchanged (issue 31): fixed and derived defines, scalar
arguments, includes beside the source, C++ entry points. The worked examples of
docs/adding-a-kernel.md ("Bringing a kernel from elsewhere") live in
docs/examples/bring_your_own/ as a user's folders, and are run here as a user runs them."""

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import compose_config
from test_bad_inputs_cli import gemmlab, one_error_line

from runner.config.spec import ProblemSize, ScalarArg, evaluate_defines, parse_arg, plan_kernel
from runner.errors import BuildError, Refused, RunError
from runner.run.execute import checked_launch, prepare
from runner.run.operations import effective_check, make_problem

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples" / "bring_your_own"
USER_FOLDERS = [f"kernel_dirs=[{EXAMPLES / 'kernels'}]",
                f"hydra.searchpath=[file://{EXAMPLES / 'conf'}]"]


def example_config(*overrides: str):
    return compose_config(*USER_FOLDERS, *overrides)


def run_on_cpu(cpu_backend, cfg, size: ProblemSize, seed: int = 0):
    """Plan, compile, one checked launch: what a run does before it times."""
    plan = plan_kernel(cfg.kernel, size)
    problem = make_problem(plan.operation, size, seed, plan.blas_beta != 0)
    prepared = prepare(cpu_backend, cfg.kernel.sources, plan, problem, cfg.kernel_dirs)
    return plan, prepared, checked_launch(cpu_backend, prepared, problem, effective_check(cfg),
                                          seed)


# ------------------------------------------------------------------ defines

def test_fixed_and_derived_defines_reach_the_compiler_as_integers():
    plan = plan_kernel(example_config("kernel=tutorial_gemm_3", "kernel.params.TSM=128",
                                      "kernel.params.WPTM=8").kernel, ProblemSize(64, 64, 64))
    assert plan.defines == {"TSM": 128, "TSN": 64, "TSK": 16, "WPTM": 8, "WPTN": 4,
                            "KERNEL": 3, "RTSM": 16, "RTSN": 16, "LPTA": 8, "LPTB": 4}
    assert plan.launches[0].local == (16, 16)  # `local: [RTSN, RTSM]`: defines are in scope


@pytest.mark.parametrize("defines, words", [
    ({"HALF": "TS / 3"}, "gave 5.333"),
    ({"HALF": "TS > 4"}, "not an integer"),
    ({"lower": "1"}, "not an upper-case macro name"),
    ({"TS": "2"}, "also a parameter"),
    ({"K": "2"}, "also a parameter or a size"),
    ({"A2": "B2 + 1", "B2": "1"}, "unknown name 'B2'"),
    ({"BIG": "2 ** 40"}, "does not fit a 32-bit int"),
    ({"X": "__import__('os')"}, "calls something other than"),
])
def test_a_define_that_is_not_an_int_is_refused_with_its_name(defines, words):
    with pytest.raises((RunError, Refused)) as raised:
        evaluate_defines("k", defines, {"TS": 16})
    assert words in str(raised.value)


def test_a_define_whose_arithmetic_fails_refuses_the_values():
    with pytest.raises(Refused, match="define Q: .*by zero"):
        evaluate_defines("k", {"Q": "TS // (TS - 16)"}, {"TS": 16})


def test_the_multi_kernel_file_needs_its_kernel_define(cpu_backend):
    cfg = example_config("kernel=tutorial_gemm_2", "~kernel.defines.KERNEL")
    with pytest.raises(BuildError, match="KERNEL .1, 2 or 3. comes from the YAML's defines"):
        run_on_cpu(cpu_backend, cfg, ProblemSize(8, 8, 8))


@pytest.mark.parametrize("overrides", [[], ["kernel.params.TSM=32", "kernel.params.WPTN=8",
                                            "kernel.params.TSK=8"]],
                         ids=["defaults", "other-shape"])
def test_the_register_blocked_kernel_is_right_at_odd_sizes(cpu_backend, overrides):
    cfg = example_config("kernel=tutorial_gemm_3", *overrides)
    for size in (ProblemSize(1, 1, 1), ProblemSize(67, 45, 33), ProblemSize(129, 70, 17)):
        plan, prepared, check = run_on_cpu(cpu_backend, cfg, size)
        assert check.passed, check.detail
        assert "-DRTSM=" in " ".join(prepared.program.options)


@pytest.mark.parametrize("name", ["tutorial_gemm_1", "tutorial_gemm_2", "tutorial_gemm_3"])
def test_one_file_three_yamls_through_the_command_line(tmp_path, name):
    done = gemmlab(tmp_path, f"kernel={name}", *USER_FOLDERS, "m=67", "n=45", "k=33",
                   f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{name} · opencl" in done.stdout and "67x45x33" in done.stdout, done.stdout


def test_a_bad_define_is_one_error_line(tmp_path):
    done = gemmlab(tmp_path, "kernel=tutorial_gemm_3", *USER_FOLDERS, "kernel.defines.RTSM=TSM/3",
                   f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}")
    one_error_line(done, "tutorial_gemm_3: bad define RTSM", "not an integer")


# ------------------------------------------------------------------ scalar arguments

KNOWN = {"M", "N", "K", "A", "B", "C"}


@pytest.mark.parametrize("text, parsed", [
    ("alpha=1.5f", ScalarArg("alpha", "float", 1.5)),
    ("beta = -2e-1F", ScalarArg("beta", "float", -0.2)),
    ("lda=K", ScalarArg("lda", "int", 33)),
    ("ldb=round_up(N, TS)", ScalarArg("ldb", "int", 48)),
    ("A", "A"),
])
def test_an_args_entry_is_a_name_or_a_typed_scalar(text, parsed):
    assert parse_arg("k", "e", text, KNOWN, {"M": 67, "N": 45, "K": 33, "TS": 16}) == parsed


@pytest.mark.parametrize("text, words", [
    ("alpha=1.0", "write 1.0f for a float"),
    ("alpha", "unknown argument 'alpha'"),
    ("A=1", "has the name of an argument the runner provides"),
    ("lda=Q", "unknown name 'Q'"),
    ("lda=2**40", "does not fit an int32"),
    ("x=1e39f", "does not fit a float32"),
])
def test_a_bad_scalar_is_refused_with_what_to_write(text, words):
    with pytest.raises(RunError, match=words):
        parse_arg("k", "e", text, KNOWN, {"M": 1, "N": 1, "K": 1})


def test_alpha_and_beta_are_the_main_launchs():
    plan = plan_kernel(example_config("kernel=scaled_gemm").kernel, ProblemSize(8, 8, 8))
    assert (plan.blas_alpha, plan.blas_beta) == (1.5, -0.5)
    assert plan.scalars["scaled_gemm.beta"] == "beta=-0.5f"


@pytest.mark.parametrize("size", [ProblemSize(1, 1, 1), ProblemSize(67, 45, 33)],
                         ids=["1x1x1", "67x45x33"])
def test_beta_is_checked_against_c0_and_c_is_restored_for_each_launch(cpu_backend, size):
    cfg = example_config("kernel=scaled_gemm")
    plan, prepared, check = run_on_cpu(cpu_backend, cfg, size, seed=3)
    assert check.passed, check.detail
    assert "alpha*A·B + beta*C0 (alpha=1.5, beta=-0.5)" in check.method
    # Launched again on its own result, the kernel gives another C; restored, the same one.
    first = cpu_backend.download(prepared.buffers["C"], (size.M, size.N))
    cpu_backend.time_ms(prepared.enqueue)
    again = cpu_backend.download(prepared.buffers["C"], (size.M, size.N))
    assert not (again == first).all()
    for _ in range(2):
        prepared.restore(cpu_backend)
        cpu_backend.time_ms(prepared.enqueue)
    assert (cpu_backend.download(prepared.buffers["C"], (size.M, size.N)) == first).all()


def test_a_result_that_ignores_beta_fails_the_check(cpu_backend):
    """The reference really holds beta*C0: the same kernel told beta=0 while C0 is checked
    with beta=-0.5 (the check's scalars patched) does not pass."""
    cfg = example_config("kernel=scaled_gemm")
    plan = plan_kernel(cfg.kernel, ProblemSize(20, 20, 20))
    problem = make_problem(plan.operation, plan.size, 0, True)
    prepared = prepare(cpu_backend, cfg.kernel.sources, plan, problem, cfg.kernel_dirs)
    prepared.blas = (1.5, 0.0)
    assert not checked_launch(cpu_backend, prepared, problem, effective_check(cfg), 0).passed


@pytest.mark.parametrize("args, words", [
    ('[M,N,K,"alpha=1",A,"lda=K",B,"ldb=N","beta=-0.5f",C,"ldc=N"]',
     "argument 4 (alpha=1) is an int, but parameter 4 of scaled_gemm.cl's scaled_gemm is a float"),
    ('[M,N,K,"alpha=1.5f",A,"lda=K",B,"ldb=N","beta=-0.5f",C]',
     "passes 10 arguments"),
    ('[M,N,K,"alpha=1.5f",A,"lda=K",B,"ldb=N","beta=-0.5f",K,"ldc=N"]',
     "argument 10 (K) is an int, but parameter 10"),
])
def test_args_are_checked_against_the_opencl_signature(cpu_backend, args, words):
    cfg = example_config("kernel=scaled_gemm", f"kernel.launches.0.args={args}")
    with pytest.raises(RunError, match=re.escape(words)):
        run_on_cpu(cpu_backend, cfg, ProblemSize(8, 8, 8))


def test_scalars_through_the_command_line(tmp_path):
    done = gemmlab(tmp_path, "kernel=scaled_gemm", *USER_FOLDERS, "m=67", "n=45", "k=33",
                   f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "scaled_gemm · opencl" in done.stdout, done.stdout


def test_nvrtc_tells_each_parameters_kind_from_the_ptx():
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from runner.backends.nvrtc import compile_cuda, ptx_signatures

    source = ('struct Pair { float a, b; };\n'
              'extern "C" __global__ void k(int M, float alpha, const float* A, double d, '
              'Pair p, unsigned char c) {}\n')
    assert ptx_signatures(compile_cuda(source, "k.cu", {}, 90).ptx)["k"] == (
        "int", "float", "pointer", "other .f64", "other .b8[]", "other .u8")


# ------------------------------------------------------------------ includes

HELPER_CL = "#define SCALE 2.0f\ninline float twice(float x) { return SCALE * x; }\n"
USES_HELPER_CL = ('#include "helper.clh"\n__kernel void k(__global float* x) '
                  '{ x[get_global_id(0)] = twice(x[get_global_id(0)]); }\n')


def test_an_opencl_source_includes_a_file_beside_it(cpu_backend, tmp_path):
    (tmp_path / "helper.clh").write_text(HELPER_CL)
    program = cpu_backend.compile(USES_HELPER_CL, "k.cl", ["k"], {}, include_dirs=[str(tmp_path)])
    assert f"-I{tmp_path}" in program.options
    with pytest.raises(BuildError, match="helper.clh"):
        cpu_backend.compile(USES_HELPER_CL, "k.cl", ["k"], {})  # no folder: not found


@pytest.mark.parametrize("header, backend", [
    *[(header, "opencl") for header in ("cublas_v2.h", "stdio.h", "vector", "cuda_runtime_api.h")],
    *[(header, "cuda") for header in ("helper_cuda.h", "helper_functions.h", "omp.h", "mpi.h")],
])
def test_a_host_header_is_refused_in_one_line(cpu_backend, tmp_path, header, backend):
    """OpenCL C can use no host header; NVRTC gets a stand-in for a system one (below), but
    not for headers of no system (the CUDA samples' helpers, OpenMP, MPI)."""
    source = f"// a kernel\n#include <{header}>\n__global__ void k() {{}}\n"
    with pytest.raises(BuildError) as raised:
        if backend == "opencl":
            cpu_backend.compile(source, "k.cl", ["k"], {}, include_dirs=[str(tmp_path)])
        else:
            pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
            from runner.backends.nvrtc import compile_cuda

            compile_cuda(source, "k.cu", {}, 90, include_dirs=[str(tmp_path)])
    assert str(raised.value).startswith(f"k.{'cl' if backend == 'opencl' else 'cu'}:2: cannot "
                                        f"include <{header}>: it is a host header, and device "
                                        "code cannot include it")
    assert "\n" not in str(raised.value)


def test_a_host_header_inside_a_header_beside_the_source_is_refused(tmp_path):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from runner.backends.nvrtc import compile_cuda

    (tmp_path / "util.cuh").write_text("#pragma once\n#include <helper_cuda.h>\n")
    with pytest.raises(BuildError, match=r"^util.cuh:2: cannot include <helper_cuda.h>"):
        compile_cuda('#include "util.cuh"\n__global__ void k() {}\n', "k.cu", {}, 90,
                     include_dirs=[str(tmp_path)])


# ------------------------------------------------------------------ host headers (CUDA)

HOST_HEADERS = ["algorithm", "cassert", "cstdio", "cstdlib", "cublas_v2.h", "stdio.h",
                "stdlib.h", "assert.h", "vector", "iostream", "cuda.h", "cuda_runtime_api.h"]


def test_a_cuh_with_host_headers_and_uint_compiles_unchanged(compile_only_cuda):
    """host_headers_sgemm.cuh starts as SGEMM_CUDA's kernels do (<algorithm>, <cassert>,
    <cstdio>, <cstdlib>, <cublas_v2.h>, <cuda_runtime.h>) and uses glibc's `uint`; the compile
    log says which host headers NVRTC was given stand-ins for."""
    plan, prepared = compile_example(compile_only_cuda, "host_headers_sgemm")
    (entry,) = plan.entries
    assert entry == "sgemm_coalesced<32>"
    assert prepared.program.signatures[entry] == ("int", "int", "int", "float", "pointer",
                                                  "pointer", "float", "pointer")
    assert plan.blas_beta == 0.0
    note = prepared.program.log.splitlines()[0]
    assert note.startswith("gemmlab: stood in for the host headers <algorithm>, <cassert>, "
                           "<cstdio>, <cstdlib>, <cublas_v2.h>"), note
    assert prepared.program.resources[entry].registers > 0


@pytest.mark.parametrize("header", HOST_HEADERS)
def test_each_system_host_header_is_stood_in_for(tmp_path, header):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from runner.backends.nvrtc import compile_cuda

    source = (f"#include <{header}>\n"
              'extern "C" __global__ void k(float* x) { uint i = threadIdx.x; ushort s = 1; '
              "assert(i < 1024); if (i == 0) printf(\"%f\\n\", x[0]); x[i] += s; }\n")
    output = compile_cuda(source, "k.cu", {}, 90, include_dirs=[str(tmp_path)],
                          name_expressions=["k"])
    from runner.backends.nvrtc import _nvrtc_finds

    # the toolkit's CUDA headers compile under NVRTC where it is installed: no stand-in then
    found = _nvrtc_finds(header, tuple(output.options[i][2:] for i in range(len(output.options))
                                       if output.options[i].startswith("-I")))
    assert found or f"<{header}>" in output.log.splitlines()[0]


def test_uint_needs_no_host_header():
    """nvcc's own host headers give every .cu file glibc's typedefs; NVRTC gets them too."""
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from runner.backends.nvrtc import compile_cuda

    output = compile_cuda('extern "C" __global__ void k(float* x) { uint i = threadIdx.x; '
                          "ulong j = i; x[i] = j; }\n", "k.cu", {}, 90, name_expressions=["k"])
    assert output.lowered == {"k": "k"}
    assert "stood in" not in output.log


def test_stand_ins_hold_what_device_code_takes_from_them():
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from runner.backends.nvrtc import compile_cuda

    source = ("#include <cstdint>\n#include <cfloat>\n#include <climits>\n#include <cmath>\n"
              'extern "C" __global__ void k(float* x) { int32_t a = INT_MAX; std::uint64_t b = '
              "UINT64_MAX; x[0] = FLT_MAX + a + b + (float)M_PI + fmaxf(x[1], -INFINITY); }\n")
    output = compile_cuda(source, "k.cu", {}, 90, name_expressions=["k"])
    assert output.lowered == {"k": "k"}


@pytest.mark.parametrize("body, name, header", [
    ("__device__ void f() { cublasHandle_t handle; }", "cublasHandle_t", "<cublas_v2.h>"),
    ("__device__ void f() { FILE* f = 0; }", "FILE", "<cstdio>"),
    ("__device__ float f(float a) { return std::max(a, 1.0f); }", "std::max", "<algorithm>"),
    ("__device__ int f() { return EXIT_FAILURE; }", "EXIT_FAILURE", "<cstdlib>"),
])
def test_device_code_that_uses_a_stood_in_header_says_which_in_one_line(body, name, header):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from runner.backends.nvrtc import compile_cuda

    source = ("#include <algorithm>\n#include <cstdio>\n#include <cstdlib>\n"
              f"#include <cublas_v2.h>\n{body}\n")
    with pytest.raises(BuildError) as raised:
        compile_cuda(source, "k.cu", {}, 90)
    message = str(raised.value)
    assert message.startswith(f"NVRTC compile of k.cu failed: k.cu:5: `{name}` is host code "
                              f"from {header}"), message
    assert "\n" not in message


def test_an_unknown_include_is_nvrtcs_one_line():
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from runner.backends.nvrtc import compile_cuda

    with pytest.raises(BuildError, match=r'^NVRTC compile of k.cu failed: k.cu:1: error: cannot '
                                         r'open source file "my_lib.h"$'):
        compile_cuda("#include <my_lib.h>\n__global__ void k() {}\n", "k.cu", {}, 90)


def test_nvrtc_compiles_the_cuda_headers_where_the_toolkit_has_them(tmp_path):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from runner.backends.includes import cuda_toolkit_include_dirs
    from runner.backends.nvrtc import compile_cuda

    if not cuda_toolkit_include_dirs():
        pytest.skip("no CUDA toolkit headers on this machine")
    source = ('#include <cuda_fp16.h>\nextern "C" __global__ void k(float* x) '
              '{ x[0] = __half2float(__float2half(x[0])); }\n')
    output = compile_cuda(source, "k.cu", {}, 90, include_dirs=[str(tmp_path)],
                          name_expressions=["k"])
    assert output.lowered == {"k": "k"}


# ------------------------------------------------------------------ C++ entries (CUDA)

@pytest.fixture(scope="module")
def compile_only_cuda():
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from runner.backends.cuda import CUDABackend

    return CUDABackend(compile_only_cc=90, use_gpu=False)


def compile_example(backend, name: str, *overrides: str):
    cfg = example_config(f"kernel={name}", "backend=cuda", *overrides)
    plan = plan_kernel(cfg.kernel, ProblemSize(256, 256, 256))
    problem = make_problem(plan.operation, ProblemSize(1, 1, 1), 0)
    return plan, prepare(backend, cfg.kernel.sources, plan, problem, cfg.kernel_dirs)


def test_a_template_entry_is_instantiated_from_the_parameters():
    plan = plan_kernel(example_config("kernel=prefetch_sgemm", "kernel.params.DOUBLE_BUFFER=0")
                       .kernel, ProblemSize(64, 64, 64))
    assert plan.main_launch.entry == "Sgemm<128, 8, 128, 8, 8, false>"
    # The parameters that feed it are no macros (they would rewrite its parameter list).
    assert plan.defines == {}
    assert plan.launches[0].local == (16, 16)


@pytest.mark.parametrize("entry, words", [
    ("Sgemm<BLOCK_SIZE_MM, 8>", "names BLOCK_SIZE_MM, which is no parameter or define"),
    ("Sgemm<BLOCK_SIZE_M / 3>", "not an integer or a truth value"),
    ("Sgemm<BLOCK_SIZE_M", "not a template instantiation"),
    ("not a name", "is not a function name"),
])
def test_a_bad_entry_is_refused_before_compiling(entry, words):
    cfg = example_config("kernel=prefetch_sgemm", f"kernel.launches.0.entry='{entry}'")
    with pytest.raises(RunError, match=re.escape(words)):
        plan_kernel(cfg.kernel, ProblemSize(64, 64, 64))


@pytest.mark.parametrize("name, entry, symbol", [
    ("prefetch_sgemm", "Sgemm<128, 8, 128, 8, 8, true>", "_Z5SgemmILi128ELi8ELi128ELi8ELi8ELb1EEvPfS0_S0_iii"),
    ("tiled_namespace", "matrixMul_tiled::matrixMul", "_ZN15matrixMul_tiled9matrixMulEPKfS1_Pfiii"),
    ("coalesced_axpby", "sgemm_coalesce<32>", "_Z14sgemm_coalesceILj32EEviiifPKfS1_fPf"),
])
def test_cpp_entries_compile_through_nvrtc_and_report_registers(compile_only_cuda, name, entry,
                                                                symbol):
    plan, prepared = compile_example(compile_only_cuda, name)
    assert plan.entries == [entry]
    program = prepared.program
    assert program.symbols[entry] == symbol
    used = program.resources[entry]
    assert used.registers and used.spill_bytes == 0 and used.local_memory_bytes is not None
    assert program.signatures[entry]  # read from the PTX: the launch's arguments were checked


def test_a_header_beside_the_template_kernel_is_included(compile_only_cuda):
    plan, prepared = compile_example(compile_only_cuda, "prefetch_sgemm")
    assert any(option.startswith("-I") and option.endswith("kernels/cuda")
               for option in prepared.program.options)
    assert "prefetch_tiles.cuh" in prepared.headers  # recorded beside the source


@pytest.mark.parametrize("params", [
    {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "THREAD_SIZE_Y": 4, "THREAD_SIZE_X": 4},
    {"BLOCK_SIZE_K": 16, "DOUBLE_BUFFER": 0},
    {"BLOCK_SIZE_M": 32, "THREAD_SIZE_Y": 2, "BLOCK_SIZE_K": 32},
], ids=["64x64-t4", "bk16-single", "32-bk32"])
def test_other_instantiations_compile(compile_only_cuda, params):
    overrides = [f"kernel.params.{k}={v}" for k, v in params.items()]
    plan, prepared = compile_example(compile_only_cuda, "prefetch_sgemm", *overrides)
    assert prepared.program.resources[plan.main_launch.entry].registers


def test_cuda_args_are_checked_against_the_ptx_signature(compile_only_cuda):
    with pytest.raises(RunError, match=re.escape("argument 4 (alpha=2) is an int, but "
                                                 "parameter 4 of coalesced_axpby.cu's "
                                                 "sgemm_coalesce<32> is a float")):
        compile_example(compile_only_cuda, "coalesced_axpby",
                        'kernel.launches.0.args=[M,N,K,"alpha=2",A,B,"beta=0.5f",C]')


def test_an_entry_that_names_no_kernel_says_which(compile_only_cuda):
    with pytest.raises(BuildError, match=re.escape("the entry `matrixMul_tiled::matrixMu` names "
                                                   "no __global__ function of tiled_namespace.cu")):
        compile_example(compile_only_cuda, "tiled_namespace",
                        "kernel.launches.0.entry=matrixMul_tiled::matrixMu")


def test_an_opencl_backend_refuses_a_cpp_entry(cpu_backend):
    with pytest.raises(RunError, match="not an OpenCL C kernel name"):
        cpu_backend.compile(USES_HELPER_CL, "k.cl", ["ns::k"], {})


def test_inspect_shows_the_instantiated_name(tmp_path):
    from runner.inspect.command import main

    assert main([*USER_FOLDERS, "backend=cuda", "kernel=prefetch_sgemm",
                 "--out", str(tmp_path)]) == 0
    summary = (tmp_path / "prefetch_sgemm-cuda" / "summary.md").read_text()
    assert "| Sgemm<128, 8, 128, 8, 8, true> |" in summary
    assert "is `_Z5SgemmILi128ELi8ELi128ELi8ELi8ELb1EEvPfS0_S0_iii` in the cubin" in summary
    assert (tmp_path / "prefetch_sgemm-cuda" / "Sgemm_128_8_128_8_8_true.sass").exists()


@pytest.mark.parametrize("name", sorted(p.stem for p in (EXAMPLES / "conf" / "kernel").glob("*.yaml")))
def test_every_worked_example_composes_plans_and_is_tested_here(name):
    spec = example_config(f"kernel={name}").kernel
    backend = "cuda" if spec.sources.get("cuda") else "opencl"
    plan_kernel(example_config(f"kernel={name}", f"backend={backend}").kernel,
                ProblemSize(33, 35, 37))
    assert name in Path(__file__).read_text(), f"{name} has no test of its own"


# ------------------------------------------------------------------ a tutorial's settings header

def test_a_settings_header_gives_way_to_the_yamls_defines(cpu_backend):
    """tutorial_settings.h says `#define KERNEL 8`, `TSM 128`, ...; the YAML's KERNEL 7 and
    TSM 64 win, so gemm7 is built with the YAML's tiles (and not "no kernel named gemm7"), and
    the compile log names each line that gave way."""
    cfg = example_config("kernel=tutorial_settings_7")
    _, prepared, checked = run_on_cpu(cpu_backend, cfg, ProblemSize(67, 45, 33))
    assert checked.passed, checked.detail
    log = prepared.program.log
    assert ("gemmlab: tutorial_settings.h:8: #define KERNEL 8 left out: the run's -DKERNEL=7 "
            "wins") in log
    assert "tutorial_settings.h:11: #define TSM 128 left out: the run's -DTSM=64 wins" in log
    assert "tutorial_settings.h:15: #define RTSM (TSM/WPTM) left out" in log
    assert "MOD2" not in log and "CEIL_DIV" not in log  # function-like macros stay
    # the user's files are recorded as they are
    assert "#define KERNEL 8" in prepared.headers["tutorial_settings.h"]


@pytest.mark.parametrize("params", [["kernel.params.TSM=32", "kernel.params.WPTM=2"],
                                    ["kernel.params.TSN=128", "kernel.params.WPTN=8"]])
def test_the_settings_header_example_at_other_tiles(cpu_backend, params):
    cfg = example_config("kernel=tutorial_settings_7", *params)
    _, _, checked = run_on_cpu(cpu_backend, cfg, ProblemSize(70, 129, 17))
    assert checked.passed, checked.detail


def test_the_settings_header_example_through_the_command_line(tmp_path):
    done = gemmlab(tmp_path, "kernel=tutorial_settings_7", *USER_FOLDERS)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no kernel named" not in done.stdout + done.stderr


def test_include_first_keeps_the_sources_own_line_numbers(cpu_backend, tmp_path):
    """The compiler gets the header's #include, then `#line 1` and the source: an error in the
    source is reported at the line an editor shows."""
    import shutil

    folder = tmp_path / "opencl"
    folder.mkdir()
    shutil.copy(EXAMPLES / "kernels" / "opencl" / "tutorial_settings.h", folder)
    lines = (EXAMPLES / "kernels" / "opencl" / "tutorial_kernels.cl").read_text().split("\n")
    lines[9] = "this is not OpenCL C;"  # line 10
    (folder / "tutorial_kernels.cl").write_text("\n".join(lines))
    cfg = example_config("kernel=tutorial_settings_7", f"kernel_dirs=[{tmp_path}]")
    with pytest.raises(BuildError) as error:
        run_on_cpu(cpu_backend, cfg, ProblemSize(8, 8, 8))
    assert "tutorial_kernels.cl:10:" in str(error.value), error.value


def test_include_first_names_a_header_beside_the_source(cpu_backend, tmp_path):
    cfg = example_config("kernel=tutorial_settings_7", "kernel.include_first.opencl=[nowhere.h]")
    with pytest.raises(Refused, match="include_first: nowhere.h is not beside "
                                      "tutorial_kernels.cl"):
        run_on_cpu(cpu_backend, cfg, ProblemSize(8, 8, 8))
    cfg = example_config("kernel=tutorial_settings_7", "+kernel.include_first.openCL=[x.h]")
    with pytest.raises(Refused, match="include_first names 'openCL', not a backend"):
        plan_kernel(cfg.kernel, ProblemSize(8, 8, 8))


def test_which_defines_of_a_header_give_way():
    from runner.backends.includes import _overriding_defines

    header = ("#define KERNEL 8\n"                 # 1: another value: gives way
              "#ifndef TS\n#define TS 16\n#endif\n"  # 3: guarded: the -D wins by itself
              "#if !defined(WPT)\n#define WPT 4\n#endif\n"
              "#define TSK 16 // same value\n"     # 8: the same value: kept
              "#define MOD2(x,y) ((x) % (y))\n"    # function-like: kept
              "#define LPTA \\\n  (TSK * 2)\n"     # 10-11: a continued define gives way whole
              "#define OTHER 1\n")                  # not a -D of the run
    defines = {"KERNEL": 7, "TS": 8, "WPT": 2, "TSK": 16, "MOD2": 1, "LPTA": 4}
    assert _overriding_defines(header, defines) == [(1, 1, "KERNEL", "8"),
                                                   (10, 11, "LPTA", "(TSK * 2)")]


def test_a_cuda_header_gives_way_too(tmp_path):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from runner.backends.nvrtc import compile_cuda

    (tmp_path / "config.cuh").write_text("#pragma once\n#define TS 8\n#define TWICE(x) (2*(x))\n")
    source = ('#include "config.cuh"\nstatic_assert(TS == 16, "the run\'s TS");\n'
              'extern "C" __global__ void k(float* x) { x[0] = TWICE(TS); }\n')
    output = compile_cuda(source, "k.cu", {"TS": 16}, 90, include_dirs=[str(tmp_path)],
                          name_expressions=["k"])
    assert "gemmlab: config.cuh:2: #define TS 8 left out: the run's -DTS=16 wins" in output.log


# ------------------------------------------------------------------ inspect checks the arguments

def test_inspect_checks_the_arguments_against_the_compiled_signature(tmp_path):
    """A launch whose arguments do not fit the kernel fails `runner.inspect` on a machine
    without a GPU in the line a run would give (runner/run/execute.py check_signatures)."""
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from runner.inspect.command import main

    conf = tmp_path / "conf" / "kernel"
    conf.mkdir(parents=True)
    spec = (EXAMPLES / "conf" / "kernel" / "host_headers_sgemm.yaml").read_text()
    spec = spec.replace("name: host_headers_sgemm", "name: swapped_sgemm").replace(
        'args: [M, N, K, "alpha=1.0f", A, B, "beta=0.0f", C]',
        'args: [M, N, K, A, "alpha=1.0f", B, "beta=0.0f", C]')
    (conf / "swapped_sgemm.yaml").write_text(spec)
    folders = [f"kernel_dirs=[{EXAMPLES / 'kernels'}]", f"hydra.searchpath=[file://{conf.parent}]"]
    done = gemmlab(tmp_path, "backend=cuda", "kernel=swapped_sgemm", *folders,
                   quick=False, prefix=("-m", "runner.inspect"))
    assert done.returncode == 1, done.stdout + done.stderr
    output = " ".join((done.stdout + done.stderr).split())
    assert ("gemmlab inspect: error: swapped_sgemm: launch sgemm_coalesced<32>: argument 4 (A) "
            "is a pointer, but parameter 4 of host_headers_sgemm.cuh's sgemm_coalesced<32> is a "
            "float"
            ) in output, output
    assert main([*USER_FOLDERS, "backend=cuda", "kernel=host_headers_sgemm",
                 "--out", str(tmp_path / "out")]) == 0


def test_beta_zero_reads_a_finite_poison_so_a_kernel_that_reads_c_passes(cpu_backend, tmp_path):
    """scaled_gemm.cl computes alpha*acc + beta*C[i] whatever beta is; with beta=0.0f its C
    holds the finite poison (-9999.99), so 0*C is 0, as BLAS allows, and the check passes."""
    from runner.backends.base import POISON

    assert np.isfinite(POISON) and float(POISON) == pytest.approx(-9999.99)
    conf = tmp_path / "conf" / "kernel"
    conf.mkdir(parents=True)
    spec = (EXAMPLES / "conf" / "kernel" / "scaled_gemm.yaml").read_text()
    assert '"beta=-0.5f"' in spec
    (conf / "scaled_gemm_beta0.yaml").write_text(
        spec.replace("name: scaled_gemm", "name: scaled_gemm_beta0")
        .replace('"beta=-0.5f"', '"beta=0.0f"'))
    cfg = compose_config(f"kernel_dirs=[{EXAMPLES / 'kernels'}]",
                         f"hydra.searchpath=[file://{conf.parent}]", "kernel=scaled_gemm_beta0")
    plan, _, checked = run_on_cpu(cpu_backend, cfg, ProblemSize(33, 35, 37))
    assert plan.blas_beta == 0.0
    assert checked.passed, checked.detail


def test_the_compile_notes_can_be_read_back_from_the_log(compile_only_cuda, cpu_backend):
    from runner.backends.includes import compile_notes

    _, prepared = compile_example(compile_only_cuda, "host_headers_sgemm")
    notes = compile_notes(prepared.program.log)
    assert notes["stood_in"][:5] == ["algorithm", "cassert", "cstdio", "cstdlib", "cublas_v2.h"]
    assert notes["gave_way"] == []
    _, prepared, _ = run_on_cpu(cpu_backend, example_config("kernel=tutorial_settings_7"),
                                ProblemSize(8, 8, 8))
    notes = compile_notes(prepared.program.log)
    assert notes["stood_in"] == []
    assert notes["gave_way"][0] == ("tutorial_settings.h:8: #define KERNEL 8 left out: the run's "
                                    "-DKERNEL=7 wins")


def test_nvrtc_leaves_the_stack_limit_as_it_found_it():
    """NVRTC raises RLIMIT_STACK to unlimited when it compiles; a process started afterwards
    would inherit it, and PoCL's threads overflow the smaller stacks glibc then gives them (a CPU
    sweep started by a process that had compiled CUDA died of SIGSEGV). A failing compile too."""
    import resource

    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from runner.backends.nvrtc import compile_cuda

    before = resource.getrlimit(resource.RLIMIT_STACK)
    try:
        resource.setrlimit(resource.RLIMIT_STACK, (8 << 20, before[1]))
        for body in ("{ }", "{ undeclared(); }"):
            source = f"// {id(body)} {body}\nextern \"C\" __global__ void k(int* x) {body}\n"
            try:
                compile_cuda(source, "stack_probe.cu", {}, 90)
            except BuildError:
                pass
            assert resource.getrlimit(resource.RLIMIT_STACK) == (8 << 20, before[1]), body
        # <algorithm> is probed alone first (does NVRTC have it?): a compile of its own
        compile_cuda("#include <algorithm>\nextern \"C\" __global__ void k2(int* x) { }\n",
                     "stack_probe2.cu", {}, 90)
        assert resource.getrlimit(resource.RLIMIT_STACK) == (8 << 20, before[1])
    finally:
        resource.setrlimit(resource.RLIMIT_STACK, before)
