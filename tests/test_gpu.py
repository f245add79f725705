"""On an NVIDIA GPU (marked `gpu`, skipped without one): every kernel in both backends,
verified at 4096 (8192 for copies) and at an odd size, recorded in MLflow with registers."""

import mlflow
import pytest
from conftest import (
    KERNEL_NAMES,
    compose_config,
    kernel_yaml,
    requires_cuda_gpu,
    requires_nvidia_opencl,
)

from runner.app import run

pytestmark = pytest.mark.gpu

BACKENDS = [
    pytest.param(["backend=cuda"], id="cuda", marks=requires_cuda_gpu),
    pytest.param(["backend=opencl", "backend.platform=NVIDIA"], id="opencl-nvidia",
                 marks=requires_nvidia_opencl),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One store for the module: a fresh sqlite store costs seconds of schema migrations."""
    return f"sqlite:///{tmp_path_factory.mktemp('gpu') / 'mlflow.db'}"


def _run_recorded(store, name: str, *overrides: str):
    """Run kernel `name` with the overrides, briefly timed, into the module's store: the config
    composed and the run MLflow recorded."""
    cfg = compose_config(f"kernel={name}", *overrides, "timing.repeats=3", "timing.warmup=1",
                         f"tracking.uri={store}")
    rate = run(cfg)
    mlflow.set_tracking_uri(store)
    recorded = mlflow.get_run(mlflow.last_active_run().info.run_id)
    assert rate is not None, (recorded.info.status, recorded.data.tags.get("failure_reason"))
    return cfg, recorded


def _run_verified(store, name: str, *overrides: str, max_rel_error: float | None = None):
    """`_run_recorded`, the result verified (and within max_rel_error of float64 where given)."""
    _, recorded = _run_recorded(store, name, *overrides)
    assert recorded.data.metrics["check/passed"] == 1.0
    if max_rel_error is not None:
        assert recorded.data.metrics["check/rel_error"] < max_rel_error
    return recorded


def _size(name: str, odd: bool) -> list[str]:
    if name.startswith("matmul_"):
        return ["m=1001", "n=1537", "k=333"] if odd else ["size=4096"]
    return ["m=1001", "n=1537"] if odd else ["size=8192"]


@pytest.mark.parametrize("odd", [False, True], ids=["large", "odd"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_kernel_verified_on_the_gpu(store, name, backend, odd):
    if "backend=opencl" in backend and "opencl" not in kernel_yaml(name)["sources"]:
        pytest.skip(f"{name} has no OpenCL source (refused: test_bad_input)")
    recorded = _run_verified(store, name, *backend, *_size(name, odd))
    assert recorded.info.status == "FINISHED"
    metrics = recorded.data.metrics
    assert metrics["kernel/registers"] > 0, "registers come from the driver (CUDA) or ptxas (OpenCL)"
    assert metrics["perf/pct_of_vendor"] > 0
    assert recorded.data.tags["device.type"] == "gpu"


THREE_TF32_STEPS = [pytest.param("matmul_11", backend.values[0], id=f"matmul_11-{backend.id}",
                                 marks=backend.marks) for backend in BACKENDS] + [
    pytest.param("matmul_12", BACKENDS[0].values[0], id="matmul_12-cuda", marks=requires_cuda_gpu),
    pytest.param("matmul_14", BACKENDS[0].values[0], id="matmul_14-cuda", marks=requires_cuda_gpu)]


@pytest.mark.parametrize("name,backend", THREE_TF32_STEPS)
@pytest.mark.parametrize("size", ["size=4096", "size=8192"])
def test_3xtf32_is_as_accurate_as_cublas_sgemm(store, name, backend, size):
    """matmul_11's, matmul_12's and matmul_14's error against float64 is no worse than twice cuBLAS SGEMM's
    on the same data, under the FP32 steps' tolerance (the 3xTF32 claim; its speed is the
    benchmark page's)."""
    cfg, recorded = _run_recorded(store, name, *backend, size)
    metrics, params = recorded.data.metrics, recorded.data.params
    assert params["kernel.precision"] == "tf32x3"
    assert params["check.tolerance"] == str(cfg.check.tolerance)  # the FP32 default
    assert metrics["check/error_vs_vendor"] <= 2.0, (metrics["check/rel_error"],
                                                     metrics["vendor/rel_error"])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("chunk", [
    ["kernel.params.KCHUNK=4"],  # a product tile over 4 BK=8 tiles: flushed between tiles
    ["kernel.params.KCHUNK=2", "kernel.params.BK=16", "kernel.params.STAGES=2"],  # inside one
], ids=["across-tiles", "within-a-tile"])
@pytest.mark.parametrize("size", [["m=1001", "n=1537", "k=333"], ["size=4096"]],
                         ids=["odd", "4096"])
def test_3xtf32_with_longer_product_chunks_is_correct_and_accurate(store, backend, chunk, size):
    """KCHUNK > 1 (64x32 warp tiles, which have room for the live product tiles): verified,
    including the last partial chunk of an odd K, and as accurate as cuBLAS SGEMM."""
    recorded = _run_verified(store, "matmul_11", *backend, *size, "kernel.params.WN=32", *chunk)
    metrics = recorded.data.metrics
    assert recorded.data.params["kernel.params.KCHUNK"] == chunk[0].split("=")[1]
    assert metrics["check/error_vs_vendor"] <= 2.0, (metrics["check/rel_error"],
                                                     metrics["vendor/rel_error"])


@pytest.mark.parametrize("name", ["matmul_10", "matmul_11"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("split", [2, 3, 8])
@pytest.mark.parametrize("size", [["m=1001", "n=1537", "k=333"], ["m=130", "n=67", "k=36"],
                                  ["m=1", "n=1", "k=1"], ["size=1024"]],
                         ids=["k-odd", "slices-past-k", "one", "1024"])
def test_split_k_sums_its_slices_exactly_once(store, name, backend, split, size):
    """SPLIT_K slices of K, each a partial C in P, summed by sum_slices: verified at an odd K
    (the last slice meets K's edge), at a K shorter than SPLIT_K tiles (slices past K store
    zeros that must not be skipped: P is poisoned), one element and 1024 (the size rule's
    case); matmul_11 as accurate as cuBLAS SGEMM, matmul_10 within its TF32 tolerance."""
    recorded = _run_verified(store, name, *backend, *size, f"kernel.params.SPLIT_K={split}",
                             "kernel.size_rules=[]")  # the split rules would set SPLIT_K here
    metrics = recorded.data.metrics
    assert recorded.data.params["kernel.params.SPLIT_K"] == str(split)
    assert metrics["postpass/sum_slices/registers"] > 0
    if name == "matmul_10":  # TF32 inputs: its own tolerance (check/passed) is the bound
        return
    if metrics.get("vendor/rel_error"):
        assert metrics["check/error_vs_vendor"] <= 2.0, (metrics["check/rel_error"],
                                                         metrics["vendor/rel_error"])
    else:  # cuBLAS exact (one element): no ratio, the FP32 bound instead
        assert metrics["check/rel_error"] < 1e-6


@pytest.mark.parametrize("params", [
    [],
    ["kernel.params.BN=64"],
    ["kernel.params.BM=64", "kernel.params.STAGES=2"],
    ["kernel.params.BN=64", "kernel.params.STAGES=6", "kernel.params.GROUP=1"],
], ids=["defaults", "bn64", "bm64-2stages", "bn64-6stages-rows"])
@pytest.mark.parametrize("size", [["m=1001", "n=1537", "k=333"], ["m=130", "n=67", "k=36"],
                                  ["m=1", "n=1", "k=1"], ["m=64", "n=128", "k=32"]],
                         ids=["k-odd", "n-odd", "one", "one-tile"])
@requires_cuda_gpu
def test_matmul_12_any_shape_and_tiling_is_correct_and_accurate(store, params, size):
    """wgmma's layouts (swizzled shared tiles, permuted k, fragment and accumulator order) and
    every edge: K % 4 != 0 (A copied element by element), N odd (scalar stores), one element,
    exactly one tile; verified against float64 and as accurate as cuBLAS SGEMM."""
    _run_verified(store, "matmul_12", "backend=cuda", *size, *params, max_rel_error=1e-6)


@pytest.mark.parametrize("params", [
    [],
    ["kernel.params.BN=64"],
    ["kernel.params.BM=64", "kernel.params.STAGES=2"],
    ["kernel.params.SMS=0", "kernel.params.GROUP=1", "kernel.params.STAGES=6",
     "kernel.params.BM=64"],
    ["kernel.params.FLUSH=4", "kernel.params.STAGES=3"],
    ["kernel.params.PRODUCER_REGS=88", "kernel.params.PRESPLIT=0"],
    ["kernel.params.PRODUCER_REGS=88", "kernel.params.A_ROUND=1", "kernel.params.BM=64",
     "kernel.params.PRESPLIT=0"],
    ["kernel.params.CLUSTER=2"],
    ["kernel.params.CLUSTER=2", "kernel.params.PRESPLIT=0"],
    ["kernel.params.CLUSTER=2", "kernel.params.BM=64", "kernel.params.A_ROUND=1",
     "kernel.params.SMS=0", "kernel.params.PRESPLIT=0"],
], ids=["defaults", "bn64", "bm64-2stages", "block-per-tile-rows-6stages", "flush4-3stages",
        "producer-88-splitters", "producer-88-a-round-bm64", "cluster2", "cluster2-splitters",
        "cluster2-bm64-a-round-block-per-tile"])
@pytest.mark.parametrize("size", [["m=1001", "n=1537", "k=333"], ["m=130", "n=67", "k=36"],
                                  ["m=1", "n=1", "k=1"], ["m=128", "n=128", "k=32"],
                                  ["m=4097", "n=4095", "k=333"]],
                         ids=["k-odd", "n-odd", "one", "one-tile", "several-tiles-a-block"])
@requires_cuda_gpu
def test_matmul_14_any_shape_and_tiling_is_correct_and_accurate(store, params, size):
    """matmul_14's ring (TMA, the splitter warps' in-place split of A, the consumers' wgmma on
    A's two parts; d summed over FLUSH stages, the last chunk partial) at every tiling and
    edge: K % 4 != 0 and N % 4 != 0 (padded copies), N odd (scalar stores), one element,
    exactly one tile and one stage, blocks looping over several tiles (the barrier phases
    carried across tiles); with CLUSTER=2 a pair's second block past N where the tiles along n
    are odd in number; verified against float64."""
    _run_verified(store, "matmul_14", "backend=cuda", *size, *params, max_rel_error=1e-6)


@pytest.mark.parametrize("params", [
    [],
    ["kernel.params.BM=256", "kernel.params.BN=128", "kernel.params.SMS=132"],
    ["kernel.params.BM=192", "kernel.params.BN=192", "kernel.params.SMS=0"],
    ["kernel.params.CLUSTER=2"],
], ids=["size-rules", "persistent-256x128", "three-consumers-192x192", "cluster2"])
@pytest.mark.parametrize("size", [["m=1001", "n=1537", "k=333"], ["m=1", "n=1", "k=1"],
                                  ["m=4097", "n=4095", "k=333"]],
                         ids=["k-odd", "one", "several-tiles-a-block"])
@requires_cuda_gpu
def test_matmul_13_inflight_any_shape_and_tiling_is_correct(store, params, size):
    """INFLIGHT=1 (a stage's wgmma group left running while the next stage's fragments load
    into the other register set, the stage released a stage later) at each tile shape: an odd
    number of stages a tile (11: the pair loop leaves after its first half), one stage, and
    blocks looping over several tiles (barrier phases carried across tiles); verified."""
    recorded = _run_verified(store, "matmul_13", "backend=cuda", "kernel.params.INFLIGHT=1",
                             *size, *params)
    assert recorded.data.params["kernel.params.INFLIGHT"] == "1"


@pytest.mark.parametrize("params", [
    [],
    ["kernel.params.STAGES=3"],
    ["kernel.params.BN=64"],
    ["kernel.params.BN=64", "kernel.params.STAGES=3", "kernel.params.SMS=0",
     "kernel.params.A_ROUND=1", "kernel.params.PRESPLIT=0"],
], ids=["defaults", "3stages", "bn64", "bn64-3stages-block-per-tile-a-round"])
@pytest.mark.parametrize("size", [["m=1", "n=1", "k=1"], ["m=70", "n=67", "k=50"],
                                  ["m=1001", "n=1537", "k=333"], ["m=130", "n=67", "k=20"],
                                  ["m=256", "n=200", "k=96"], ["m=1000", "n=1030", "k=999"],
                                  ["m=4097", "n=4095", "k=333"]],
                         ids=["one", "n-odd-2-stages", "k-odd-11-stages", "k-below-bk",
                              "3-stages", "1000x1030x999", "several-tiles-a-block"])
@requires_cuda_gpu
def test_matmul_14_inflight_any_shape_and_tiling_is_correct_and_accurate(store, params, size):
    """INFLIGHT=1 (the product tile as two wgmma halves, one running while the other is added
    and the next stage's fragments load into the other set; a loop trip of two stages ending
    drained) at each tiling: one stage (K = 1, K < BK), an even and an odd number of stages a
    tile (the trip's second stage absent: 1, 3, 11), several tiles a block (barrier phases and
    the fragment sets carried across tiles); verified against float64, as accurate as
    INFLIGHT=0."""
    recorded = _run_verified(store, "matmul_14", "backend=cuda", "kernel.params.INFLIGHT=1",
                             "kernel.params.CLUSTER=1", *size, *params, max_rel_error=1e-6)
    assert recorded.data.params["kernel.params.INFLIGHT"] == "1"


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("size", [["m=1001", "n=1537", "k=333"], ["m=130", "n=67", "k=36"],
                                  ["m=1", "n=1", "k=1"], ["size=4096"]],
                         ids=["k-odd", "n-odd", "one", "4096"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_9_cp_async_ring_of_any_depth_is_correct(store, backend, size, stages):
    """matmul_9's cp.async ring (CUDA, and OpenCL on NVIDIA sm_80+ through inline PTX) at every
    depth: fewer tiles than stages, a ragged last tile (K % BK != 0), N % 4 != 0 (4-byte copies);
    the local memory it holds shows the ring is STAGES deep (OpenCL's register path holds 2)."""
    recorded = _run_verified(store, "matmul_9", *backend, *size, f"kernel.params.STAGES={stages}",
                             "kernel.params.BK=8",  # 4 stages of 128x128x16 would not fit 48 KiB
                             "kernel.size_rules=[]")  # the rules would set STAGES at 4096 (OpenCL)
    tile = {k: int(recorded.data.params[f"kernel.params.{k}"]) for k in ("BM", "BN", "BK")}
    ring_bytes = stages * tile["BK"] * (tile["BM"] + tile["BN"]) * 4
    held = recorded.data.metrics["kernel/shared_bytes"]
    assert ring_bytes <= held <= ring_bytes + 16, "STAGES tiles (NVIDIA's OpenCL adds 16 bytes)"


@pytest.mark.parametrize("pad_b", [1, 0])
@pytest.mark.parametrize("k", [16, 24, 25, 64])
@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_9_steady_and_guarded_iterations_meet_correctly(store, backend, k, pad_b):
    """The tile loop's steady copy (whole tiles, no guards) runs K // BK - (STAGES - 1)
    iterations and the guarded copy the rest: none (K = 16 is 2 tiles of 8 with 3 stages), one
    steady iteration before the tail with and without a ragged tile (24, 25), several (64); with
    N % 4 != 0 and PAD_B = 0, B's 4-byte copies keep every iteration in the guarded copy."""
    _run_verified(store, "matmul_9", *backend, "m=130", "n=67", f"k={k}", "kernel.params.BK=8",
                  "kernel.params.STAGES=3", f"kernel.params.PAD_B={pad_b}",
                  "kernel.size_rules=[]", max_rel_error=5e-6)


@pytest.mark.parametrize("k_unroll", [16, 4])
@pytest.mark.parametrize("a_prepass", [0, 1])
@pytest.mark.parametrize("tiling", [["kernel.params.BK=8"],  # 3 stages of 16 exceed OpenCL's 48 KiB
                                    ["kernel.params.BM=128", "kernel.params.BN=32",
                                     "kernel.params.WM=64", "kernel.params.WN=32",
                                     "kernel.params.TM=8", "kernel.params.TN=8",
                                     "kernel.params.STAGES=4"],
                                    ["kernel.params.BM=64", "kernel.params.BN=32",
                                     "kernel.params.WM=32", "kernel.params.WN=32",
                                     "kernel.params.TM=8", "kernel.params.TN=4",
                                     "kernel.params.STAGES=2"]],
                         ids=["128x128", "128x32", "64x32"])
@pytest.mark.parametrize("size", [["m=1001", "n=1536", "k=333"], ["m=130", "n=67", "k=36"],
                                  ["m=4097", "n=4095", "k=4093"]],
                         ids=["k-odd", "n-odd", "all-odd"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_9_with_and_without_the_a_pre_pass_is_correct(store, backend, size, tiling,
                                                             a_prepass, k_unroll):
    """A transposed by the pre-pass or read in place (4-byte cp.async copies into a swizzled
    stage) through the cp.async ring, the steps of a tile unrolled whole or in 4-step chunks,
    with ragged tile rows, a ragged K and N % 4 != 0; in place and with B aligned, the kernel is
    the only launch."""
    recorded = _run_verified(store, "matmul_9", *backend, *size, *tiling,
                             f"kernel.params.A_PREPASS={a_prepass}",
                             f"kernel.params.K_UNROLL={k_unroll}", "kernel.size_rules=[]",
                             max_rel_error=5e-6)
    b_aligned = size[1] == "n=1536"
    expected = "matmul_9" if not a_prepass and b_aligned else "prepare_operands + matmul_9"
    assert recorded.data.tags["timing.launches"] == expected


@pytest.mark.parametrize("tiling", [(64, 8), (64, 16), (32, 8), (16, 4)], ids=lambda t: f"{t[0]}x{t[1]}")
@pytest.mark.parametrize("shape", [(8191, 8193), (1000, 1030), (1024, 1027), (203, 261)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("backend", BACKENDS)
def test_transpose_5_ragged_float4_interior_is_bit_exact(store, backend, shape, tiling):
    """transpose_5's ragged path moves float4s in interior tiles (aligned float4 loads that
    cover each src row's TILE floats from any alignment, float4 stores from each dst row's
    sector boundary) and single floats on the edges: rows starting at every alignment, with the
    8-row halo (M odd) and without it (M % 8 == 0), at several tile shapes."""
    m, n = shape
    tile, stride = tiling
    _run_verified(store, "transpose_5", *backend, f"m={m}", f"n={n}",
                  f"kernel.params.TILE={tile}", f"kernel.params.STRIDE={stride}")


@pytest.mark.parametrize("shape", [(8191, 8193), (1000, 1030), (203, 261)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@requires_cuda_gpu
def test_transpose_5_ragged_path_under_its_register_cap_is_bit_exact(store, shape):
    """On the ragged path the size rules add a register cap of 255 in CUDA, which makes ptxas
    build another program (144 registers instead of 56 at 64x8): that program, as runs take it."""
    m, n = shape
    recorded = _run_verified(store, "transpose_5", "backend=cuda", f"m={m}", f"n={n}")
    assert recorded.data.params["kernel.max_registers"] == "255"


@pytest.mark.parametrize("backend", BACKENDS)
def test_tf32_is_recorded_as_reduced_precision_and_compared_with_cublas_tf32(store, backend):
    cfg, recorded = _run_recorded(store, "matmul_10", *backend, "size=4096")
    metrics, params = recorded.data.metrics, recorded.data.params
    assert params["kernel.precision"] == "tf32"
    assert float(params["check.tolerance"]) == cfg.kernel.tolerance
    assert metrics["vendor_tf32/gflops"] > 0 and metrics["perf/pct_of_vendor_tf32"] > 0
    # cuBLAS in TF32 mode is reduced precision too: far from SGEMM's error, near the step's.
    assert metrics["vendor_tf32/rel_error"] > 10 * metrics["vendor/rel_error"]
    assert metrics["check/rel_error"] < 3 * metrics["vendor_tf32/rel_error"]
