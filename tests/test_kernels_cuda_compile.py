"""Every CUDA kernel compiles through NVRTC for sm_90a, with registers and spills read back."""

import re

import pytest
from conftest import (
    CUDA_SIZE_RULES,
    KERNEL_NAMES,
    compose_config,
    kernel_yaml,
    requires_cuda_gpu,
    variant_params,
)

from runner.backends.cuda import CUDABackend
from runner.config.spec import ProblemSize, plan_kernel
from runner.errors import RunError
from runner.inspect import command as inspect_cli
from runner.inspect.program import find_tool
from runner.inspect.sass import parse_sass
from runner.run.execute import prepare
from runner.run.operations import make_problem

pytest.importorskip("cupy_backends.cuda.libs.nvrtc")


@pytest.fixture(scope="module")
def compile_only_cuda():
    return CUDABackend(compile_only_cc=90, use_gpu=False)


def _compile(backend, name, params):
    overrides = [f"kernel={name}", "backend=cuda"]
    overrides += [f"kernel.params.{k}={v}" for k, v in params.items()]
    cfg = compose_config(*overrides)
    plan = plan_kernel(cfg.kernel, ProblemSize(256, 256, 256))
    problem = make_problem(plan.operation, ProblemSize(1, 1, 1), seed=0)
    return plan, prepare(backend, cfg.kernel.sources, plan, problem)


# Spills a default is known to have, with the most it may spill and why it is kept.
ACCEPTED_SPILLS = {
    # 64x64 warp tiles: 128 accumulators, 64 split fragments and a fresh 16x8 product tile per
    # mma chain need more than 255 registers. The spilled values are the loaders' per-thread
    # copy plan (sources, offsets, guards), reloaded from L1 about ten times per tile against
    # 96 HMMA per warp and k-step: 104 bytes (52 stored, 52 loaded) and a 56-byte stack since the plan is set
    # up once; the shape is still the fastest CUDA one on an H100 (63.9 TFLOPS at 4096 against
    # 48 to 60.5 for the 64x32 and 32x64 ones, with or without longer KCHUNKs).
    "matmul_11": (104, "64x64 warp tiles"),  # (bytes of spills, and of the stack they live in)
}


def _assert_wgmma_async_without_spills(prepared, name) -> None:
    """ptxas' log says nothing of wgmma (serialized, C75xx warnings) nor of setmaxnreg (which it
    ignores with a warning where it cannot apply it), and the entry neither spills nor uses a
    stack."""
    log = prepared.program.log.replace("\0", "")
    assert "serialized" not in log and "C75" not in log and "wgmma" not in log.lower(), log
    assert "setmaxnreg" not in log.lower(), log
    used = prepared.program.resources[name]
    assert used.registers is not None and used.spill_bytes == 0 and used.stack_bytes == 0, log


@pytest.mark.gpu
@requires_cuda_gpu
def test_a_compile_only_backend_leaves_the_gpu_alone_where_there_is_one():
    """What this file checks without a GPU it checks the same way with one: the compile-only
    backend loads no module and binds no buffer, while the GPU backend on the same machine
    does (matmul_13's tensor maps over the 1x1x1 inputs would be refused)."""
    _, prepared = _compile(CUDABackend(compile_only_cc=90, use_gpu=False), "matmul_13", {})
    assert all(kernel is None for kernel in prepared.program.kernels.values())
    assert prepared.buffers == {}
    with pytest.raises(RunError, match="reaches .* floats of A"):
        _compile(CUDABackend(), "matmul_13", {})


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_defaults_compile_for_sm_90_without_spills(compile_only_cuda, name):
    cfg = compose_config(f"kernel={name}")
    plan, prepared = _compile(compile_only_cuda, name, dict(cfg.kernel.params))
    assert "-arch=sm_90a" in prepared.program.options  # Hopper's arch-specific target
    for entry in plan.entries:
        used = prepared.program.resources[entry]
        assert used.registers is not None and used.registers > 0, prepared.program.log
        allowed = ACCEPTED_SPILLS.get(name, (0, ""))[0]
        assert used.spill_bytes <= allowed, f"{entry} spills at its defaults:\n{prepared.program.log}"
        assert used.stack_bytes <= allowed, f"{entry} has a stack frame:\n{prepared.program.log}"
        assert used.local_memory_bytes is not None


@pytest.mark.parametrize("name, index", CUDA_SIZE_RULES)
def test_size_rule_shapes_compile_without_more_spills_than_the_defaults(compile_only_cuda, name,
                                                                        index):
    """A rule's tile shape is what a run at those sizes compiles: held to the defaults' limit."""
    params = {**compose_config(f"kernel={name}").kernel.params,
              **kernel_yaml(name)["size_rules"][index]["params"]}
    plan, prepared = _compile(compile_only_cuda, name, params)
    for entry in plan.entries:
        used = prepared.program.resources[entry]
        assert used.spill_bytes <= ACCEPTED_SPILLS.get(name, (0, ""))[0], prepared.program.log


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_other_allowed_values_compile(compile_only_cuda, name):
    for params in variant_params(name)[1:]:
        plan, prepared = _compile(compile_only_cuda, name, params)
        assert all(prepared.program.resources[e].registers for e in plan.entries)


@pytest.mark.parametrize("chunk", [{"KCHUNK": 2}, {"KCHUNK": 4}, {"KCHUNK": 8},
                                   {"KCHUNK": 2, "BK": 16, "STAGES": 2},
                                   {"KCHUNK": 4, "BK": 16, "STAGES": 2}],
                         ids=["2", "4", "8", "2-within-bk16", "4-across-bk16"])
def test_matmul_11_product_chunks_compile_without_spills(compile_only_cuda, chunk):
    """KCHUNK > 1 keeps a product tile per mma tile live across the chunk: with 64x32 warp
    tiles (the constraint's room for it) that fits in registers, in and across tiles."""
    params = {**compose_config("kernel=matmul_11").kernel.params, "WN": 32, **chunk}
    plan, prepared = _compile(compile_only_cuda, "matmul_11", params)
    used = prepared.program.resources["matmul_11"]
    assert used.registers is not None and used.spill_bytes == 0, prepared.program.log


@pytest.mark.parametrize("params", [{}, {"BN": 64}, {"BM": 64}, {"BN": 64, "STAGES": 6}],
                         ids=["defaults", "bn64", "bm64", "bn64-6stages"])
def test_matmul_12_wgmma_runs_asynchronously(compile_only_cuda, params):
    """ptxas serializes wgmma (waits after every one) when it cannot prove the accumulator and
    fragment registers untouched while they run, and says so in its log; matmul_12 must not
    get that, nor spill."""
    params = {**compose_config("kernel=matmul_12").kernel.params, **params}
    _, prepared = _compile(compile_only_cuda, "matmul_12", params)
    _assert_wgmma_async_without_spills(prepared, "matmul_12")


@pytest.mark.parametrize("params", [{}, {"BN": 64}, {"BM": 64}, {"BM": 64, "STAGES": 6},
                                    {"PRODUCER_REGS": 88, "PRESPLIT": 0},
                                    {"PRODUCER_REGS": 88, "A_ROUND": 1, "PRESPLIT": 0},
                                    {"PRODUCER_REGS": 88, "BM": 64, "PRESPLIT": 0}, {"CLUSTER": 2},
                                    {"CLUSTER": 2, "BM": 64, "A_ROUND": 1, "PRESPLIT": 0}],
                         ids=["defaults", "bn64", "bm64", "bm64-6stages", "producer-88-splitters",
                              "producer-88-a-round", "producer-88-bm64", "cluster2",
                              "cluster2-bm64-a-round"])
def test_matmul_14_wgmma_runs_asynchronously_and_setmaxnreg_holds(compile_only_cuda, params):
    """As matmul_12: no serialized wgmma and no spills; and the two-consumer shapes' register
    split (setmaxnreg, which ptxas ignores with a warning where it cannot apply it) is taken."""
    params = {**compose_config("kernel=matmul_14").kernel.params, **params}
    _, prepared = _compile(compile_only_cuda, "matmul_14", params)
    _assert_wgmma_async_without_spills(prepared, "matmul_14")


@pytest.mark.parametrize("stages", [4, 3])
@pytest.mark.parametrize("bn", [128, 64], ids=["bn128-two-consumers", "bn64-one-consumer"])
def test_matmul_14_inflight_halves_run_asynchronously_without_spills(compile_only_cuda, bn,
                                                                     stages):
    """INFLIGHT=1 leaves one half of the product tile running while the consumer adds the other
    half and loads the next stage's fragments into a second set: ptxas must neither serialize
    the wgmma (C7513 for a running set rewritten, C7514 for a running half's accumulators read,
    as when a half ran across the loop's back edge) nor spill (acc, d and two sets: 192 of the
    232 registers setmaxnreg gives two consumers), and the register split must hold."""
    params = {**compose_config("kernel=matmul_14").kernel.params, "INFLIGHT": 1, "CLUSTER": 1,
              "BN": bn, "STAGES": stages}
    _, prepared = _compile(compile_only_cuda, "matmul_14", params)
    _assert_wgmma_async_without_spills(prepared, "matmul_14")


needs_cuda_tools = pytest.mark.skipif(
    find_tool("nvdisasm", "nvidia-cuda-nvdisasm") is None
    and find_tool("cuobjdump", "nvidia-cuda-cuobjdump") is None,
    reason="needs nvdisasm or cuobjdump (pip install -e '.[cuda]')")


def _registers(operand):
    """The registers a SASS operand names: R24, or R7 of [R7+0x400]."""
    return [int(r) for r in re.findall(r"\bR(\d+)\b", operand)]


@needs_cuda_tools
@pytest.mark.parametrize("bn", [128, 64], ids=["bn128", "bn64"])
def test_matmul_14_inflight_loop_loads_and_adds_beside_the_running_halves(bn):
    """In matmul_14's k loop with INFLIGHT=1 (the shortest loop with wgmma), walked in order
    with the wgmma groups it leaves running (HGMMA ... gsb0 ends a group, WARPGROUP.DEPBAR.LE
    gsb0, N leaves N running): the next stage's LDS and one half's FADDs run while a group
    runs, no instruction reads or writes a running group's accumulators, and none writes a
    running group's fragment registers (the LDS fill the other set). Two passes, the second
    checked, so that the groups left running at the back edge are known."""
    cfg = compose_config("backend=cuda", "kernel=matmul_14", "kernel.params.INFLIGHT=1",
                         "kernel.params.CLUSTER=1", f"kernel.params.BN={bn}")
    sass = inspect_cli.inspect_config(cfg).files["matmul_14.sass"]
    code = parse_sass(sass)["matmul_14"]
    loops = [code[next(j for j, x in enumerate(code) if x.address == i.target):k + 1]
             for k, i in enumerate(code) if i.target is not None and i.target < i.address]
    loop = min((body for body in loops if any(x.base == "HGMMA" for x in body)), key=len)
    hgmma = [x for x in loop if x.base == "HGMMA"]
    assert len(hgmma) == 48 and all(x.opcode.startswith("HGMMA.64x64x8.F32.TF32") for x in hgmma)
    waits = [x.operands for x in loop if x.opcode.startswith("WARPGROUP.DEPBAR")]
    assert waits.count("gsb0, 0x1") == 3 and waits.count("gsb0, 0x0") == 1, waits  # a drain a trip

    running, open_group = [], None  # groups: (accumulator registers, fragment registers)
    beside = {"LDS": 0, "FADD": 0}  # instructions issued while a group runs
    for walk in range(2):
        for x in loop:
            if x.base == "HGMMA":
                operands = [o.strip() for o in x.operands.split(",")]
                d, a = _registers(operands[0])[0], _registers(operands[1])[0]
                if open_group is None:
                    open_group = (set(range(d, d + 32)), set())
                open_group[1].update(range(a, a + 4))
                if "gsb0" in x.operands:
                    running.append(open_group)
                    open_group = None
                continue
            if x.opcode.startswith("WARPGROUP.DEPBAR"):
                del running[:max(0, len(running) - int(x.operands.split(",")[1], 16))]
                continue
            if walk == 0 or not running:
                continue
            operands = [o.strip() for o in x.operands.split(",")]
            named = {r for o in operands for r in _registers(o)}
            written = set(_registers(operands[0])) if operands and "[" not in operands[0] else set()
            if x.opcode.startswith("LDS.64"):
                written |= {r + 1 for r in written}
            for accumulators, fragments in running:
                assert not named & accumulators, f"{x.opcode} {x.operands}: a running accumulator"
                assert not written & fragments, f"{x.opcode} {x.operands}: a running fragment"
            if x.base in beside:
                beside[x.base] += 1
    assert beside["LDS"] == 16, beside  # both stages' fragment loads
    assert beside["FADD"] >= 3 * 32, beside  # three of a trip's four halves' adds (and splits)


@pytest.mark.parametrize("tile", [None, 0, 1, {"BM": 192, "BN": 192, "SMS": 0}],
                         ids=["defaults-256x128", "rule-128x64", "rule-256x64-one-consumer",
                              "three-consumers-192x192"])
@pytest.mark.parametrize("cluster", [1, 2], ids=["cluster1", "cluster2"])
def test_matmul_13_inflight_pipeline_runs_asynchronously_without_spills(compile_only_cuda, tile,
                                                                         cluster):
    """INFLIGHT=1 keeps a stage's wgmma group running while the next stage's fragments load
    into a second register set: at every tile shape the size rules pick (an int: that rule's),
    and at 192x192, ptxas must neither serialize the wgmma (C7513, as when a running wgmma's
    fragment registers are rewritten) nor spill (192x192's three consumers have 160 registers
    for 96 accumulators and two sets; 256x64's one consumer holds 128 accumulators)."""
    params = {**compose_config("kernel=matmul_13").kernel.params, "INFLIGHT": 1,
              "CLUSTER": cluster}
    if isinstance(tile, int):
        params.update(kernel_yaml("matmul_13")["size_rules"][tile]["params"])
    elif tile is not None:
        params.update(tile)
    _, prepared = _compile(compile_only_cuda, "matmul_13", params)
    _assert_wgmma_async_without_spills(prepared, "matmul_13")
