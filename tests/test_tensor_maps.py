"""TMA tensor maps as launch arguments (`tensor_map(BUFFER, rows=..., ...)` in a spec's `args`):
parsed and checked against what the TMA unit takes before anything runs, each mistake one line;
bound by the CUDA backend only (any other backend refuses the plan before a compile); checked
against the kernel's 128-byte `__grid_constant__` parameter like any other argument."""

import re
from types import SimpleNamespace

import pytest
from conftest import compose_config

from runner.backends.base import CompiledProgram
from runner.config.spec import ProblemSize, TensorMapArg, parse_tensor_map, plan_kernel
from runner.errors import Refused, RunError
from runner.run.execute import prepare
from runner.run.kernel_program import bind_tensor_map, check_signatures
from runner.run.operations import make_problem

KNOWN = {"M", "N", "K", "A", "B", "C", "AP"}
NAMES = {"M": 1000, "N": 1030, "K": 999, "BM": 128}


def plan_13(size):
    return plan_kernel(compose_config("kernel=matmul_13").kernel, ProblemSize(*size))


def test_matmul_13_maps_a_and_b_in_place_where_their_rows_are_16_byte_aligned():
    plan = plan_13((4096, 4096, 4096))
    assert [launch.entry for launch in plan.launches] == ["matmul_13"]
    a_map, b_map = plan.tensor_maps
    assert a_map == TensorMapArg("A", 4096, 4096, 4096, 256, 32, 128)
    assert b_map == TensorMapArg("B", 4096, 4096, 4096, 32, 32, 128)
    assert str(a_map) == "tensor_map(A, rows=4096, cols=4096, ld=4096, box=256x32, swizzle=128)"


@pytest.mark.parametrize("size, a, b, groups", [
    ((1000, 1030, 999), ("AP", 1000), ("BP", 1032), 1000 + 999),
    ((4096, 4096, 4093), ("AP", 4096), ("B", 4096), 4096),
    ((4096, 4098, 4096), ("A", 4096), ("BP", 4100), 4096),
], ids=["both", "k-odd", "n-even-unaligned"])
def test_matmul_13_maps_a_padded_copy_only_of_what_tma_cannot_take(size, a, b, groups):
    """K % 4 != 0: A's rows are not 16-byte aligned, the pre-pass copies A into AP (rows of
    round_up(K, 4)) and A's map points there with the logical K; likewise B for N % 4 != 0."""
    plan = plan_13(size)
    assert [launch.entry for launch in plan.launches] == ["pad_operands", "matmul_13"]
    assert plan.launches[0].groups == (groups,)
    a_map, b_map = plan.tensor_maps
    assert (a_map.buffer, a_map.ld, a_map.cols) == (*a, size[2])
    assert (b_map.buffer, b_map.ld, b_map.cols) == (*b, size[1])
    for arg in (a_map, b_map):  # a padded copy holds every element its map reaches
        reach = plan.scratch[arg.buffer] if arg.buffer in plan.scratch else None
        assert reach is None or arg.floats <= reach


def test_a_tensor_map_takes_expressions_and_defaults():
    arg = parse_tensor_map("k: launch e", "tensor_map(AP, rows=M, cols=K, ld=round_up(K, 4), "
                           "box_rows=BM, box_cols=32, swizzle=128)", KNOWN, NAMES)
    assert arg == TensorMapArg("AP", 1000, 999, 1000, 128, 32, 128)
    plain = parse_tensor_map("k: launch e", "tensor_map(A, rows=8, cols=16, box_rows=8, "
                             "box_cols=4)", KNOWN, NAMES)
    assert (plain.ld, plain.swizzle) == (16, 0)
    chosen = parse_tensor_map("k: launch e", "tensor_map(A if K % 4 == 0 else AP, rows=M, "
                              "cols=K, ld=1000, box_rows=8, box_cols=8)", KNOWN, NAMES)
    assert chosen.buffer == "AP"


@pytest.mark.parametrize("text, words", [
    ("tensor_map(A, rows=M, cols=K, box_rows=8, box_cols=8)",
     "ld=999 floats is 3996 bytes from row to row, and TMA needs a multiple of 16 bytes"),
    ("tensor_map(A, rows=M, cols=K, ld=1000, box_rows=8, box_cols=8, swizzle=16)",
     "swizzle=16 is none of 0, 32, 64, 128"),
    ("tensor_map(A, rows=M, cols=K, ld=1000, box_rows=8, box_cols=64, swizzle=128)",
     "a box row of 256 bytes is wider than its 128-byte swizzle"),
    ("tensor_map(A, rows=M, cols=K, ld=1000, box_rows=512, box_cols=8)",
     "a box of 512x8: each side must be within 1..256"),
    ("tensor_map(A, rows=M, cols=K, ld=1000, box_rows=8, box_cols=6)",
     "box_cols=6 floats is 24 bytes, and TMA copies whole 16 bytes"),
    ("tensor_map(A, rows=M, cols=K, ld=996, box_rows=8, box_cols=8)",
     "ld=996 is less than cols=999"),
    ("tensor_map(A, rows=M, cols=K, ld=1000, box_rows=8)", "missing box_cols"),
    ("tensor_map(A, rows=M, cols=K, ld=1000, box_rows=8, box_cols=8, stride=4)",
     "unknown key(s) stride"),
    ("tensor_map(D, rows=M, cols=K, ld=1000, box_rows=8, box_cols=8)",
     "'D' is not a buffer (buffers: ['A', 'AP', 'B', 'C'])"),
    ("tensor_map(M, rows=M, cols=K, ld=1000, box_rows=8, box_cols=8)", "'M' is not a buffer"),
    ("tensor_map(A, rows=M, cols=X, ld=1000, box_rows=8, box_cols=8)",
     "bad cols: expression 'X' uses unknown name 'X'"),
    ("tensor_map(A if Q else AP, rows=M, cols=K, ld=1000, box_rows=8, box_cols=8)",
     "bad buffer condition"),
    ("tensor_map(A, rows=M, cols=K / 2, ld=1000, box_rows=8, box_cols=8)",
     "bad cols: expression 'K / 2' gave 499.5, not an integer"),
    ("tensor_map(A, rows=M", "cannot parse it"),
    ("tensor_map(A, B, rows=M, cols=K, box_rows=8, box_cols=8)", "write tensor_map(BUFFER"),
])
def test_a_bad_tensor_map_is_one_line_naming_it(text, words):
    with pytest.raises(RunError, match=re.escape(words)) as raised:
        parse_tensor_map("k: launch e", text, KNOWN, NAMES)
    assert "\n" not in str(raised.value) and str(raised.value).startswith("k: launch e: 'tensor_map(")


def test_a_tensor_map_in_a_spec_is_checked_when_the_plan_is_made():
    cfg = compose_config("kernel=matmul_13",
                         'kernel.launches.1.args.3="tensor_map(A, rows=M, cols=K, box_rows=BM, '
                         'box_cols=BK, swizzle=128)"')
    plan_kernel(cfg.kernel, ProblemSize(64, 64, 64))  # aligned rows: fine
    with pytest.raises(RunError, match=re.escape("matmul_13: launch matmul_13: 'tensor_map(A, "
                                                 "rows=M, cols=K, box_rows=BM, box_cols=BK, "
                                                 "swizzle=128)': ld=63 floats is 252 bytes")):
        plan_kernel(cfg.kernel, ProblemSize(64, 64, 63))


def test_a_backend_without_tensor_maps_refuses_the_plan_before_compiling():
    """Only CUDA makes them: any other backend refuses in one line, before a compile."""
    from runner.backends.base import Backend
    from runner.backends.opencl import OpenCLBackend

    assert OpenCLBackend.tensor_maps is False and Backend.tensor_maps is False
    plan = plan_13((64, 64, 64))
    backend = SimpleNamespace(name="opencl", tensor_maps=False,
                              compile=lambda *a, **k: pytest.fail("compiled"))
    with pytest.raises(Refused, match=re.escape("matmul_13 passes TMA tensor maps (tensor_map(A, "
                                                "rows=64, cols=64, ld=64, box=256x32, "
                                                "swizzle=128)), which backend=opencl cannot "
                                                "make (CUDA only)")):
        prepare(backend, {"opencl": "matmul_13.cl"}, plan, make_problem(
            plan.operation, ProblemSize(1, 1, 1), seed=0))


def test_a_tensor_map_reaching_past_its_buffer_is_refused_before_encoding():
    arg = TensorMapArg("AP", rows=10, cols=7, ld=8, box_rows=8, box_cols=8)
    backend = SimpleNamespace(tensor_map=lambda *a: pytest.fail("encoded"))
    plan = SimpleNamespace(name="k")
    with pytest.raises(RunError, match=re.escape("reaches 79 floats of AP, which has 78")):
        bind_tensor_map(backend, plan, arg, {"AP": SimpleNamespace(count=78, inner=None)})


def test_a_tensor_map_is_checked_against_the_kernels_parameter():
    plan = plan_13((64, 64, 64))
    declared = ("int", "int", "int", "tensor_map", "tensor_map", "pointer")
    check_signatures(plan, CompiledProgram({}, "", [], signatures={"matmul_13": declared}),
                     "matmul_13.cu", "cuda")
    wrong = ("int", "int", "int", "pointer", "tensor_map", "pointer")
    with pytest.raises(RunError, match=re.escape("argument 4 (tensor_map(A, rows=64, cols=64, "
                                                 "ld=64, box=256x32, swizzle=128)) is a "
                                                 "tensor_map, but parameter 4 of matmul_13.cu's "
                                                 "matmul_13 is a pointer")):
        check_signatures(plan, CompiledProgram({}, "", [], signatures={"matmul_13": wrong}),
                         "matmul_13.cu", "cuda")


def test_nvrtc_tells_a_grid_constant_tensor_map_parameter():
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from runner.backends.nvrtc import compile_cuda, ptx_signatures

    source = ('struct __align__(64) Map { unsigned long long opaque[16]; };\n'
              'struct Small { unsigned long long opaque[16]; };\n'
              'extern "C" __global__ void k(const __grid_constant__ Map m, Small s, float* p) '
              '{ p[0] = (float)(m.opaque[0] + s.opaque[0]); }\n')
    assert ptx_signatures(compile_cuda(source, "k.cu", {}, 90).ptx)["k"] == (
        "tensor_map", "other .b8[]", "pointer")
