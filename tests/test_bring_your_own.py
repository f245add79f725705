"""Kernels brought from elsewhere, unchanged (issue 31): fixed and derived defines, scalar
arguments, includes beside the source, C++ entry points. The worked examples of
docs/adding-a-kernel.md ("Bringing a kernel from elsewhere") live in
docs/examples/bring_your_own/ as a user's folders, and are run here as a user runs them."""

from pathlib import Path

import pytest
from conftest import compose_config
from test_bad_inputs_cli import gemmlab, one_error_line

from runner.config.spec import ProblemSize, evaluate_defines, plan_kernel
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
    problem = make_problem(plan.operation, size, seed)
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
