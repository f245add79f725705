"""Kernel specs: parameter checks, each constraint's refusal with its reason, safe expressions."""

import re
from pathlib import Path

import pytest
from conftest import (
    KERNEL_NAMES,
    compose_config,
    constrained_param_combinations,
    kernel_yaml,
)

from runner.config.expressions import (
    ArithmeticFailure,
    ExpressionError,
    evaluate,
    evaluate_int,
)
from runner.config.spec import ProblemSize, plan_kernel
from runner.errors import RunError


def plan_for(name: str, size=(64, 64, 64), **params):
    overrides = [f"kernel={name}"] + [f"kernel.params.{k}={v}" for k, v in params.items()]
    cfg = compose_config(*overrides)
    return plan_kernel(cfg.kernel, ProblemSize(*size))


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_defaults_plan_cleanly_and_cover_the_output(name):
    plan = plan_for(name, size=(127, 129, 65))
    main = plan.main_launch
    covered = [g * l for g, l in zip(main.groups, main.local)]
    assert main.work_group_size <= 1024
    assert all(c >= 1 for c in covered)
    assert plan.min_bytes > 0


def holds(constraint, names) -> bool:
    try:
        return bool(evaluate(constraint["rule"], names))
    except ArithmeticFailure:
        return False


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_each_constraint_refuses_with_its_reason(name):
    """For every constraint, an allowed combination that breaks it alone is refused with its reason.

    (A constraint that no allowed combination breaks on its own is not exercised here.)
    """
    constraints = kernel_yaml(name).get("constraints", [])
    for constraint in constraints:
        others = [c for c in constraints if c is not constraint]
        for params in constrained_param_combinations(name):
            names = {**params, "M": 64, "N": 64, "K": 64}
            if not holds(constraint, names) and all(holds(c, names) for c in others):
                with pytest.raises(RunError, match=re.escape(constraint["reason"])):
                    plan_for(name, **params)
                break


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_a_value_outside_the_allowed_list_is_refused(name):
    spec = kernel_yaml(name)
    param, values = next(iter(spec["allowed"].items()))
    bad = max(values) + 1
    with pytest.raises(RunError, match=rf"{param}={bad} is not an allowed value"):
        plan_for(name, **{param: bad})


@pytest.mark.parametrize("size", [(0, 8, 8), (8, -1, 8), (8, 8, 0)])
def test_sizes_below_one_are_refused(size):
    with pytest.raises(RunError, match="must be >= 1"):
        plan_for("matmul_2", size=size)


def test_sizes_past_32_bit_indexing_are_refused():
    with pytest.raises(RunError, match="32-bit"):
        plan_for("matmul_2", size=(70000, 70000, 8))


def test_expressions_allow_arithmetic_and_helpers():
    assert evaluate_int("ceil_div(N, TS) * TS", {"N": 100, "TS": 32}) == 128
    assert evaluate("TS % WPT == 0 and TS <= 64", {"TS": 32, "WPT": 4}) is True


def test_expressions_compare_strings_only_for_equality():
    assert evaluate("backend == 'opencl' and N > 8", {"backend": "opencl", "N": 9}) is True
    assert evaluate("backend != 'opencl'", {"backend": "cuda"}) is True
    for expression in ("backend < 'z'", "backend + 'x' == 'cudax'", "backend * 2 == 4"):
        with pytest.raises(ExpressionError):
            evaluate(expression, {"backend": "cuda"})


@pytest.mark.parametrize("expression", [
    "__import__('os').system('true')", "TS.__class__", "open('x')", "[TS]", "'a' * 3", "ZZ + 1",
    "'a' == 'a' and 'b'",
])
def test_expressions_refuse_anything_else(expression):
    with pytest.raises(ExpressionError):
        evaluate(expression, {"TS": 32})


def test_matmul_9_pads_b_only_when_its_rows_are_not_16_byte_aligned():
    """N % 4 != 0: the pre-pass also copies B into BP (rows of round_up(N, 32)), one more group
    row per 32 columns of B; N % 4 == 0 or PAD_B = 0: no extra groups, BP a one-float stub."""
    aligned = plan_for("matmul_9", size=(4096, 4096, 4096))
    assert aligned.launches[0].groups == (128, 128) and aligned.scratch["BP"] == 1
    odd = plan_for("matmul_9", size=(4097, 4095, 4093))
    assert odd.launches[0].groups == (128, 129 + 128)
    assert odd.scratch["BP"] == 4093 * 4096
    unpadded = plan_for("matmul_9", size=(4097, 4095, 4093), PAD_B=0)
    assert unpadded.launches[0].groups == (128, 129) and unpadded.scratch["BP"] == 1


def test_matmul_9_reading_a_in_place_drops_the_pre_pass_unless_b_is_padded():
    """A_PREPASS = 0: no AT (a one-float stub), and the pre-pass runs only for B's copy (its
    `when`), with B's group rows alone; the kernel is then the only launch at N % 4 == 0."""
    aligned = plan_for("matmul_9", size=(4096, 4096, 4096), A_PREPASS=0)
    assert [launch.entry for launch in aligned.launches] == ["matmul_9"]
    assert aligned.entries == ["matmul_9"] and aligned.scratch["AT"] == 1
    odd = plan_for("matmul_9", size=(4097, 4095, 4093), A_PREPASS=0)
    assert [launch.entry for launch in odd.launches] == ["prepare_operands", "matmul_9"]
    assert odd.launches[0].groups == (128, 128) and odd.scratch["AT"] == 1
    both_off = plan_for("matmul_9", size=(4097, 4095, 4093), A_PREPASS=0, PAD_B=0)
    assert [launch.entry for launch in both_off.launches] == ["matmul_9"]


def test_matmul_11_split_k_launches_its_slices_then_sums_them():
    """SPLIT_K > 1: the kernel's grid gains a z of SPLIT_K slices writing partial Cs into P
    (SPLIT_K * M * N floats), then sum_slices adds them into C; the step's own launch stays the
    main one (its registers are the run's), sum_slices is reported as a post-pass."""
    single = plan_for("matmul_11", size=(1000, 1030, 999))
    assert [launch.entry for launch in single.launches] == ["matmul_11"]
    assert single.launches[0].groups == (9, 8) and single.scratch["P"] == 1
    split = plan_for("matmul_11", size=(1000, 1030, 999), SPLIT_K=3)
    assert [launch.entry for launch in split.launches] == ["matmul_11", "sum_slices"]
    kernel, summing = split.launches
    assert kernel.groups == (9, 8, 3) and kernel.args[-1] == "P"
    assert summing.args == ("M", "N", "P", "C") and summing.groups == (-(-1000 * 1030 // 256),)
    assert split.scratch["P"] == 3 * 1000 * 1030
    assert split.main_launch is kernel and split.helper_launches() == [("postpass", summing)]


def test_a_pre_pass_is_a_helper_launch_before_the_main_one():
    plan = plan_for("matmul_9", size=(4097, 4095, 4093))
    assert plan.main_launch.entry == "matmul_9"
    assert [(side, launch.entry) for side, launch in plan.helper_launches()] == [
        ("prepass", "prepare_operands")]


@pytest.mark.parametrize("size, params, overlapping", [
    ((1000, 1030, 999), {}, True),  # the pre-pass runs: the kernel may start as it finishes
    ((1000, 1030, 999), {"OVERLAP": 0}, False),
    ((1024, 1024, 1024), {"A_PREPASS": 0}, False),  # no pre-pass: nothing to overlap
])
def test_matmul_9_overlaps_its_pre_pass_only_where_one_runs(size, params, overlapping):
    plan = plan_for("matmul_9", size=size, **{"BM": 64, "BN": 64, "WM": 32, "WN": 32, "TM": 4,
                                              "TN": 8, **params})
    assert plan.main_launch.overlap_previous is overlapping
    assert not plan.launches[0].overlap_previous


def test_an_overlapping_launch_without_a_wait_in_its_source_is_refused():
    from runner.run.kernel_program import check_overlap_waits

    plan = plan_for("matmul_9", size=(1000, 1030, 999))
    with pytest.raises(RunError, match="never runs griddepcontrol.wait"):
        check_overlap_waits(plan, "cuda", "mine.cu", "__global__ void matmul_9() {}")
    check_overlap_waits(plan, "opencl", "mine.cl", "__kernel void matmul_9() {}")
    source = Path(__file__).parents[1] / "kernels" / "cuda" / "matmul_9.cu"
    check_overlap_waits(plan, "cuda", "matmul_9.cu", source.read_text())


def test_a_launch_when_that_is_not_an_expression_is_a_clear_error():
    cfg = compose_config("kernel=matmul_9", "kernel.launches.0.when='A_PREPASS +'")
    with pytest.raises(RunError, match="bad `when` of launch prepare_operands"):
        plan_kernel(cfg.kernel, ProblemSize(64, 64, 64))
