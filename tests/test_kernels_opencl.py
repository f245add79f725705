"""Every kernel, through OpenCL on the CPU: correct at small and odd sizes, several parameters."""

import pytest
from conftest import (
    MOVE_KERNELS,
    NVIDIA_ONLY_KERNELS,
    PORTABLE_SGEMM_KERNELS,
    compose_config,
    variant_params,
)

from runner.config.spec import ProblemSize, plan_kernel
from runner.errors import Refused
from runner.run.execute import checked_launch, prepare
from runner.run.limits import check_device_support, check_launch_limits
from runner.run.operations import make_problem

SGEMM_SIZES = [(1, 1, 1), (17, 33, 9), (127, 129, 65), (64, 64, 64)]
# (203, 261) and (200, 259) have tiles of 64 that neither start nor end a dst row, where
# transpose_5's ragged path stores unguarded (200: M % 8 == 0, no halo rows loaded).
MOVE_SIZES = [(1, 1, 1), (17, 33, 1), (127, 129, 1), (64, 96, 1), (5, 300, 1), (203, 261, 1),
              (200, 259, 1)]


def _run(backend, name, params, size):
    overrides = [f"kernel={name}"] + [f"kernel.params.{k}={v}" for k, v in params.items()]
    cfg = compose_config(*overrides)
    plan = plan_kernel(cfg.kernel, ProblemSize(*size))
    problem = make_problem(plan.operation, plan.size, seed=size[0] * 7 + size[1])
    prepared = prepare(backend, cfg.kernel.sources, plan, problem)
    return checked_launch(backend, prepared, problem, cfg.check, seed=1)


def _ids(values):
    return ",".join(f"{k}={v}" for k, v in values.items())


@pytest.mark.parametrize("name,params", [(n, p) for n in PORTABLE_SGEMM_KERNELS
                                         for p in variant_params(n)],
                         ids=lambda v: _ids(v) if isinstance(v, dict) else v)
def test_sgemm_kernel_matches_float64(cpu_backend, name, params):
    for size in SGEMM_SIZES:
        result = _run(cpu_backend, name, params, size)
        assert result.passed, f"{name} {params} at {size}: {result.detail}"
        assert result.rel_error < 1e-5


# matmul_9 reading A in place (A_PREPASS = 0): the transposing, swizzled loader in every work-group
# size it has (128 work-items: 4 swizzle patterns; 64: 2; 256), with ragged rows (M % BM != 0),
# a ragged last tile (K % BK != 0), N % 4 != 0 with and without B's padded copy, and BK = 32.
A_IN_PLACE_TILINGS = [
    {},
    {"BM": 128, "BN": 32, "WM": 64, "WN": 32, "TM": 8, "TN": 8},
    {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "TM": 4, "TN": 8, "PAD_B": 0},
    {"BM": 128, "BN": 64, "WM": 32, "WN": 32, "TM": 4, "TN": 8, "BK": 32, "STAGES": 2},
]


@pytest.mark.parametrize("params", A_IN_PLACE_TILINGS, ids=_ids)
def test_matmul_9_reading_a_in_place_matches_float64(cpu_backend, params):
    for size in [(1, 1, 1), (17, 33, 9), (130, 67, 41), (257, 64, 40), (64, 128, 32)]:
        result = _run(cpu_backend, "matmul_9", {"A_PREPASS": 0, **params}, size)
        assert result.passed, f"A in place {params} at {size}: {result.detail}"
        assert result.rel_error < 1e-5


@pytest.mark.parametrize("params", [{"K_UNROLL": 4}, {"K_UNROLL": 8},
                                    {"K_UNROLL": 8, "BK": 32, "BN": 64, "STAGES": 2},
                                    {"K_UNROLL": 4, "A_PREPASS": 0}], ids=_ids)
def test_matmul_9_steps_in_chunks_match_float64(cpu_backend, params):
    """K_UNROLL < BK: a tile's steps as a loop of unrolled chunks, the barrier in the last trip."""
    for size in [(1, 1, 1), (130, 67, 41), (64, 128, 96)]:
        result = _run(cpu_backend, "matmul_9", params, size)
        assert result.passed, f"chunks {params} at {size}: {result.detail}"
        assert result.rel_error < 1e-5


@pytest.mark.parametrize("name,params", [(n, p) for n in MOVE_KERNELS for p in variant_params(n)],
                         ids=lambda v: _ids(v) if isinstance(v, dict) else v)
def test_copy_and_transpose_kernels_are_bit_exact(cpu_backend, name, params):
    for size in MOVE_SIZES:
        result = _run(cpu_backend, name, params, size)
        assert result.passed, f"{name} {params} at {size}: {result.detail}"


@pytest.mark.parametrize("name", NVIDIA_ONLY_KERNELS)
def test_tensor_core_steps_are_refused_on_the_cpu_before_a_compile(cpu_backend, name):
    plan = plan_kernel(compose_config(f"kernel={name}").kernel, ProblemSize(64, 64, 64))
    with pytest.raises(Refused, match=r"needs an NVIDIA GPU of compute capability \d\.\d or later"):
        check_device_support(plan, cpu_backend.device_info())


def test_a_step_for_one_architecture_is_refused_on_any_other():
    """matmul_12 (wgmma, sm_90a) on a later GPU, which lacks the instruction."""
    import dataclasses

    from runner.backends.base import DeviceInfo

    plan = plan_kernel(compose_config("kernel=matmul_12").kernel, ProblemSize(64, 64, 64))
    hopper = DeviceInfo("H100", "NVIDIA", "CUDA", "580", "gpu", 1 << 36, 1 << 36, 49152, 1024,
                        (1024, 1024, 64), 132, "9.0", dynamic_local_memory_bytes=232448)
    check_device_support(plan, hopper)
    check_launch_limits(plan, hopper)  # 197632 bytes of dynamic shared memory: allowed
    with pytest.raises(Refused, match=r"compute capability 9\.0 exactly .* is 10\.0"):
        check_device_support(plan, dataclasses.replace(hopper, compute_capability="10.0"))
    with pytest.raises(Refused, match=r"asks for 197632 bytes of dynamic local/shared memory"):
        check_launch_limits(plan, dataclasses.replace(hopper, dynamic_local_memory_bytes=None))


def test_a_kernel_that_skips_elements_is_caught(cpu_backend, tmp_path, monkeypatch):
    """The poisoned output catches an element the kernel never wrote."""
    import runner.run.execute

    broken = tmp_path / "matmul_1.cl"
    broken.write_text((runner.run.execute.kernel_source_path("opencl", "matmul_1.cl")).read_text()
                      .replace("if (row >= M || col >= N) return;",
                               "if (row >= M || col >= N || (row == 3 && col == 5)) return;"))
    monkeypatch.setattr(runner.run.execute, "kernel_source_path", lambda backend, name, *dirs: broken)
    result = _run(cpu_backend, "matmul_1", {"TS": 16}, (17, 33, 9))
    assert not result.passed
    assert "[3, 5]" in result.detail
