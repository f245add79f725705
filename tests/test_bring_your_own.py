"""Kernels brought from elsewhere, unchanged (issue 31): fixed and derived defines, scalar
arguments, includes beside the source, C++ entry points. The worked examples of
docs/adding-a-kernel.md ("Bringing a kernel from elsewhere") live in
docs/examples/bring_your_own/ as a user's folders, and are run here as a user runs them."""

import re
from pathlib import Path

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


@pytest.mark.parametrize("header", ["cublas_v2.h", "stdio.h", "vector", "cuda_runtime_api.h"])
@pytest.mark.parametrize("backend", ["opencl", "cuda"])
def test_a_host_header_is_refused_in_one_line(cpu_backend, tmp_path, header, backend):
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

    (tmp_path / "util.cuh").write_text("#pragma once\n#include <iostream>\n")
    with pytest.raises(BuildError, match=r"^util.cuh:2: cannot include <iostream>"):
        compile_cuda('#include "util.cuh"\n__global__ void k() {}\n', "k.cu", {}, 90,
                     include_dirs=[str(tmp_path)])


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

    return CUDABackend(compile_only_cc=90, require_gpu=False)


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
