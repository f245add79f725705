"""Tile shapes chosen by problem size (a spec's `size_rules`): which rule holds, what the
command line keeps, and that every rule's values make a valid, correct kernel."""

import pytest
from conftest import KERNEL_NAMES, PORTABLE_KERNELS, compose_config, kernel_yaml

from runner.config.size_rules import apply_size_rules, pinned_params
from runner.config.spec import ProblemSize, plan_kernel
from runner.run.execute import checked_launch, prepare
from runner.run.operations import make_problem

RULES = [(name, index) for name in KERNEL_NAMES
         for index, _ in enumerate(kernel_yaml(name).get("size_rules") or [])]


def test_matmul_9_takes_small_tiles_where_large_ones_leave_sms_idle():
    small = compose_config("kernel=matmul_9", "size=512")  # OpenCL, the default; 16 128x128 tiles
    assert "BM=64" in apply_size_rules(small, set())
    assert (small.kernel.params.BM, small.kernel.params.WM, small.kernel.params.TM) == (64, 32, 4)
    large = compose_config("kernel=matmul_9", "backend=cuda", "shape=square_4096")
    assert apply_size_rules(large, set()) is None
    assert (large.kernel.params.BM, large.kernel.params.BK, large.kernel.params.STAGES) == (128, 16, 3)


def test_matmul_9_in_opencl_takes_a_shallower_tile_where_128x128x16_would_not_fit():
    """NVIDIA's OpenCL adds 16 bytes to the 48 KiB of 3 stages of 128x128x16 tiles."""
    large = compose_config("kernel=matmul_9", "backend=opencl", "shape=square_4096")
    assert "BK=8" in apply_size_rules(large, set())
    assert (large.kernel.params.BM, large.kernel.params.BN, large.kernel.params.BK,
            large.kernel.params.STAGES) == (128, 128, 8, 3)
    pinned = compose_config("kernel=matmul_9", "backend=opencl", "shape=square_4096",
                            "kernel.params.STAGES=2")
    assert apply_size_rules(pinned, {"STAGES"}) is None
    assert (pinned.kernel.params.BK, pinned.kernel.params.STAGES) == (16, 2)


@pytest.mark.parametrize("backend, sizes, tile", [
    ("cuda", ["shape=1000x1030x999"], (64, 32, 8, 2)),  # 8 x 33 = 264 of 128x32: 528 of 64x32
    ("cuda", ["size=1024"], (128, 64, 8, 3)),  # 8 x 16 = 128 blocks of 128x64: one wave
    ("cuda", ["size=768"], (128, 64, 8, 3)), ("cuda", ["size=896"], (128, 64, 8, 3)),
    ("cuda", ["size=1280"], (64, 64, 16, 3)),  # 200 of 128x64, 400 of 128x32 (past 264): 64x64
    ("cuda", ["size=512"], (64, 64, 16, 3)),  # 64 blocks either way: 64x64 has more warps
    ("cuda", ["shape=square_2048"], (128, 128, 16, 3)),
    ("opencl", ["shape=1000x1030x999"], (128, 32, 8, 4)),  # 136 of 128x64 would be two waves
    ("opencl", ["size=1024"], (128, 64, 8, 3)), ("opencl", ["size=768"], (128, 64, 8, 3)),
    ("opencl", ["size=512"], (64, 64, 16, 3)),
    ("opencl", ["shape=square_2048"], (128, 128, 8, 3)),
])
def test_matmul_9_takes_tiles_that_fill_the_sms_in_one_wave(backend, sizes, tile):
    cfg = compose_config("kernel=matmul_9", f"backend={backend}", *sizes)
    rule = apply_size_rules(cfg, set())
    params = cfg.kernel.params
    assert (params.BM, params.BN, params.BK, params.STAGES) == tile, rule
    if tile[:2] in ((128, 64), (128, 32)):
        lanes = (16, 4) if backend == "opencl" and tile[:2] == (128, 32) else (8, 8)
        assert (params.WM, params.WN, params.TM, params.TN) == (64, 32, *lanes)
    if tile[:2] == (64, 32):  # two 32x32 warps, 8x4 a lane
        assert (params.WM, params.WN, params.TM, params.TN) == (32, 32, 8, 4)


@pytest.mark.parametrize("shape, block_n", [("square_1024", 64), ("m=512", 64),
                                             ("1000x1030x999", 128), ("square_2048", 128)])
def test_matmul_12_halves_its_tile_only_where_that_still_takes_one_wave(shape, block_n):
    """64 blocks of 128x128 at 1024 become 128 of 128x64 (one wave on 132 SMs); at
    1000x1030x999 halving would make 136 blocks, two waves, slower than 72 blocks."""
    sizes = [shape, "n=512", "k=512"] if shape.startswith("m=") else [f"shape={shape}"]
    cfg = compose_config("kernel=matmul_12", "backend=cuda", *sizes)
    rule = apply_size_rules(cfg, set())
    assert cfg.kernel.params.BN == block_n and (rule is not None) == (block_n == 64)


def test_a_rule_can_name_the_backend():
    opencl = compose_config("kernel=matmul_11", "backend=opencl", "shape=square_4096")
    assert "backend == 'opencl'" in apply_size_rules(opencl, set())
    assert opencl.kernel.params.WN == 32
    cuda = compose_config("kernel=matmul_11", "backend=cuda", "shape=square_4096")
    assert apply_size_rules(cuda, set()) is None and cuda.kernel.params.WN == 64


def test_a_tile_value_on_the_command_line_keeps_the_whole_shape_as_given():
    cfg = compose_config("kernel=matmul_9", "size=1024", "kernel.params.TM=8")
    pinned = pinned_params(["kernel=matmul_9", "size=1024", "kernel.params.TM=8"])
    assert pinned == {"TM"}
    assert apply_size_rules(cfg, pinned) is None
    assert (cfg.kernel.params.BM, cfg.kernel.params.TM) == (128, 8)


def test_matmul_9_caps_registers_where_that_measured_faster_and_the_small_tiles_do_not():
    """An explicit cap changes how ptxas allocates even where it does not bind: the 128x128
    tile ran faster with 255, the 128x64, 64x64 and 64x32 tiles slower (conf/kernel/matmul_9.yaml);
    OpenCL's 128x32 rule there sets none, so the kernel's cap stays."""
    large = compose_config("kernel=matmul_9", "backend=cuda", "shape=square_4096")
    assert apply_size_rules(large, set()) is None and large.kernel.max_registers == 255
    narrow = compose_config("kernel=matmul_9", "backend=cuda", "shape=1000x1030x999")
    assert "max_registers=None" in apply_size_rules(narrow, set())  # 64x32 tiles
    assert narrow.kernel.max_registers is None and narrow.kernel.params.BN == 32
    narrow_cl = compose_config("kernel=matmul_9", "backend=opencl", "shape=1000x1030x999")
    assert "max_registers" not in apply_size_rules(narrow_cl, set())
    assert narrow_cl.kernel.max_registers == 255
    one_wave = compose_config("kernel=matmul_9", "backend=cuda", "size=1024")
    assert "max_registers=None" in apply_size_rules(one_wave, set())
    assert one_wave.kernel.max_registers is None
    assert plan_kernel(one_wave.kernel, ProblemSize(1024, 1024, 1024)).max_registers is None
    small = compose_config("kernel=matmul_9", "backend=cuda", "size=512")  # 64x64 tiles
    assert "max_registers=None" in apply_size_rules(small, set())


def test_a_register_cap_on_the_command_line_stays_under_a_rule_that_sets_one():
    overrides = ["kernel=matmul_9", "backend=cuda", "size=1024", "kernel.max_registers=200"]
    cfg = compose_config(*overrides)
    pinned = pinned_params(overrides)
    assert pinned == {"max_registers"}
    assert "BN=64" in apply_size_rules(cfg, pinned)  # the tile shape still follows the rule
    assert cfg.kernel.max_registers == 200 and cfg.kernel.params.BN == 64


@pytest.mark.parametrize("shape, tile, cap", [
    ("8191x8193", 64, 255), ("1000x1030", 32, 255),  # the ragged path: capped
    ("square_8192", 64, None), ("square_1024", 32, None),  # the vector path: not
])
def test_transpose_5_caps_registers_on_its_ragged_path_only(shape, tile, cap):
    cfg = compose_config("kernel=transpose_5", "backend=cuda", f"shape={shape}")
    apply_size_rules(cfg, set())
    assert (cfg.kernel.params.TILE, cfg.kernel.max_registers) == (tile, cap)


def test_rules_can_be_turned_off():
    cfg = compose_config("kernel=matmul_9", "size=1024", "kernel.size_rules=[]")
    assert apply_size_rules(cfg, set()) is None and cfg.kernel.params.BM == 128


@pytest.mark.parametrize("name, index", RULES)
def test_every_rule_gives_a_valid_kernel_that_computes_correctly(cpu_backend, name, index):
    rule = kernel_yaml(name)["size_rules"][index]
    overrides = [f"kernel={name}"] + [f"kernel.params.{k}={v}" for k, v in rule["params"].items()]
    cfg = compose_config(*overrides)
    size = ProblemSize(70, 67, 50)
    plan = plan_kernel(cfg.kernel, size)  # the spec's constraints hold for the rule's values
    if name not in PORTABLE_KERNELS:
        return
    problem = make_problem(plan.operation, plan.size, seed=3)
    prepared = prepare(cpu_backend, cfg.kernel.sources, plan, problem)
    result = checked_launch(cpu_backend, prepared, problem, cfg.check, seed=3)
    assert result.passed, result.detail


def test_a_run_records_the_rule_it_applied_and_the_values_it_ran_with(tmp_path):
    import mlflow

    from runner.app import run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose_config("kernel=matmul_9", "backend.device_type=cpu", "m=70", "n=67", "k=50",
                         "timing.warmup=0", "timing.repeats=3", f"tracking.uri={uri}")
    assert run(cfg) is not None
    mlflow.set_tracking_uri(uri)
    recorded = mlflow.get_run(mlflow.last_active_run().info.run_id)
    assert recorded.data.tags["kernel.size_rule"].startswith("ceil_div(M, 128) * ceil_div(N, 128)")
    assert recorded.data.params["kernel.params.BM"] == "64"
    assert recorded.data.params["kernel.params.TM"] == "4"


@pytest.mark.parametrize("shape, compact", [("square_4096", 0), ("4097x4095x4093", 1),
                                            ("1000x1030x999", 1), ("m=4096 n=4095 k=4096", 1),
                                            ("m=4096 n=4096 k=4095", 1)])
def test_matmul_11_keeps_a_compact_copy_plan_where_a_copy_path_is_ragged(shape, compact):
    """CUDA's matmul_11 copies A (K % 4 != 0) or B (N % 4 != 0) by guarded 4-byte copies on
    ragged shapes, which ran far faster with the compact copy plan; OpenCL's own rule wins
    there (it has no plan)."""
    sizes = shape.split() if shape.startswith("m=") else [f"shape={shape}"]
    cfg = compose_config("kernel=matmul_11", "backend=cuda", *sizes)
    rule = apply_size_rules(cfg, set())
    assert cfg.kernel.params.COMPACT_PLAN == compact and (rule is not None) == bool(compact)
    opencl = compose_config("kernel=matmul_11", "backend=opencl", *sizes)
    assert "backend == 'opencl'" in apply_size_rules(opencl, set())
    assert opencl.kernel.params.COMPACT_PLAN == 0


@pytest.mark.parametrize("sizes, split", [
    (["size=512"], 8),                    # 16 tiles of 128x128: 8 slices, 128 blocks
    (["size=768"], 6),                    # 36 tiles: 216 blocks
    (["size=1024"], 4),                   # 64 tiles: 256 blocks
    (["m=1024", "n=1024", "k=8192"], 4),  # deep K, the same tiles
    (["shape=1000x1030x999"], 3),         # 72 tiles: 216 blocks (4 slices would be 288)
    (["size=1280"], 2),                   # 100 tiles: 200 blocks
    (["shape=square_2048"], 1),           # 256 tiles: the two block slots of 132 SMs are full
    (["m=1024", "n=1024", "k=100"], 1),   # slices under 64 deep: not worth a second pass
    (["m=512", "n=512", "k=300"], 4),     # too shallow for 8 or 6 slices, deep enough for 4
])
def test_matmul_11_splits_k_where_its_tiles_leave_block_slots_empty(sizes, split):
    """CUDA's matmul_11 cuts K into as many slices as fill one wave of 264 blocks (132 SMs, two
    blocks each), each slice at least 64 deep, with the compact copy plan; OpenCL splits the
    same way with 64x64 warp tiles (faster split than its usual 64x32), but not in two (1280
    measured slower split)."""
    cfg = compose_config("kernel=matmul_11", "backend=cuda", *sizes)
    rule = apply_size_rules(cfg, set())
    assert cfg.kernel.params.SPLIT_K == split
    if split > 1:
        assert cfg.kernel.params.COMPACT_PLAN == 1 and f"SPLIT_K={split}" in rule
        tiles = -(-cfg.m // 128) * -(-cfg.n // 128)
        assert tiles * split <= 264 and cfg.k >= 64 * split
    opencl = compose_config("kernel=matmul_11", "backend=opencl", *sizes)
    assert "backend == 'opencl'" in apply_size_rules(opencl, set())
    opencl_split = split if split > 2 else 1  # 1280 measured slower split in OpenCL
    assert opencl.kernel.params.SPLIT_K == opencl_split
    assert opencl.kernel.params.WN == (64 if opencl_split > 1 else 32)  # faster split, 32 else


@pytest.mark.parametrize("backend", ["backend=cuda", "backend=opencl"])
@pytest.mark.parametrize("sizes, split", [
    (["size=512"], 8),
    (["size=768"], 6),
    (["size=1024"], 4),
    (["m=1024", "n=1024", "k=8192"], 4),
    (["shape=1000x1030x999"], 3),
    (["size=1280"], 2),
    (["shape=square_2048"], 1),           # measured slower split, in both backends
    (["m=1024", "n=1024", "k=100"], 1),
])
def test_matmul_10_splits_k_where_its_tiles_leave_block_slots_empty(backend, sizes, split):
    """matmul_10 (TF32) takes matmul_11's split rules in both backends: its 128-thread blocks
    also fit two an SM (CUDA 226 registers, OpenCL 254), and both measured faster split."""
    cfg = compose_config("kernel=matmul_10", backend, *sizes)
    rule = apply_size_rules(cfg, set())
    assert cfg.kernel.params.SPLIT_K == split
    assert (rule is not None) == (split > 1)
    if split > 1:
        tiles = -(-cfg.m // 128) * -(-cfg.n // 128)
        assert tiles * split <= 264 and cfg.k >= 64 * split and f"SPLIT_K={split}" in rule
