"""`python -m runner.inspect` and the inspect/ artifacts of a run: CPU only (NVRTC and NVIDIA's
disassemblers from pip for CUDA, the CPU's OpenCL driver for OpenCL)."""

import pytest
from conftest import SGEMM_KERNELS, compose_config, without_cuda_gpu
from mlflow.tracking import MlflowClient

from runner.inspect import command as inspect_cli
from runner.inspect.program import find_tool
from runner.inspect.sass import (
    InstructionMix,
    ffma_bank_conflicts,
    ffma_moved_accumulators,
    main_loop,
    parse_sass,
)

needs_cuda_tools = pytest.mark.skipif(
    find_tool("nvdisasm", "nvidia-cuda-nvdisasm") is None
    and find_tool("cuobjdump", "nvidia-cuda-cuobjdump") is None,
    reason="needs nvdisasm or cuobjdump (pip install -e '.[cuda]')")


@pytest.fixture(scope="module")
def matmul_9_cuda():
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    return inspect_cli.inspect_config(compose_config("backend=cuda", "kernel=matmul_9"))


@needs_cuda_tools
def test_matmul_9_cuda_is_register_tiled_with_wide_shared_loads_and_cp_async(matmul_9_cuda):
    main = matmul_9_cuda.main
    assert main.entry == "matmul_9"
    assert main.resources.registers > 0
    assert main.resources.spill_store_bytes == 0 and main.resources.spill_load_bytes == 0
    assert main.barriers == 1
    assert main.mix is not None and main.loop is not None, matmul_9_cuda.notes
    assert main.loop.ffma_share > 0.5  # the main loop: where the time goes
    assert main.mix.ffma_share > 0.5
    assert main.mix.width_count("LDS", 128) > 0
    assert main.mix.count("LDGSTS") > 0  # cp.async
    assert main.mix.barriers > 0  # BAR
    assert main.loop.barriers > 0
    assert main.mix.bank_conflicts is not None
    files = matmul_9_cuda.files
    assert {"matmul_9.ptx", "matmul_9.sass", "ptxas.txt", "summary.md"} <= set(files)
    assert ".entry matmul_9" in files["matmul_9.ptx"] and "cp.async" in files["matmul_9.ptx"]
    assert "LDGSTS" in files["matmul_9.sass"]
    assert "Used 255 registers" in files["ptxas.txt"] or "registers" in files["ptxas.txt"]
    assert "| FFMA (share) |" in files["summary.md"] and "reg % 2" in files["summary.md"]


@needs_cuda_tools
@pytest.mark.parametrize("shape", ["size=4096", "size=1024"])
def test_matmul_9_cuda_steady_loop_is_one_basic_block(shape):
    """The steady copy of matmul_9's tile loop (the main loop at 4096 and under the 1024 size
    rule) has no branch but its back edge: a branch in its body split it where the tiles meet,
    and ptxas then moved accumulators between registers there (416 FFMAs a tile at 4096, where
    the steady copy has about 100) and the FFMA loop issued less often (H100: 81% -> 85%)."""
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    cfg, _ = inspect_cli.compose(["backend=cuda", "kernel=matmul_9", shape])
    loop = inspect_cli.inspect_config(cfg).main.loop
    assert loop is not None
    assert loop.count("BRA") == 1 and loop.barriers == 1
    if shape == "size=4096":  # the 128x64 tiles of 8x8 at 1024 move a third even so (191 of 512)
        assert loop.moved_accumulators < loop.ffma // 8


@needs_cuda_tools
@pytest.mark.parametrize("shape", ["size=4096", "shape=4097x4095x4093"])
def test_matmul_11_cuda_k_loop_works_out_no_shared_address_again(shape):
    """With its A and B tiles in two __shared__ arrays, ptxas worked out the second array's
    shared-window address again on every trip of matmul_11's k loop (an S2UR of the block's
    cluster rank), and 4096 ran at 123% of cuBLAS SGEMM against 127% with one array (H100).
    Both copy plans (the per-load one at 4096, the compact one the size rule takes for ragged
    shapes) keep the k loop free of it."""
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    cfg, _ = inspect_cli.compose(["backend=cuda", "kernel=matmul_11", shape])
    loop = inspect_cli.inspect_config(cfg).main.loop
    assert loop is not None
    assert loop.tensor == 96  # the k loop: 3 x (64/16) x (64/8) mma.sync per 8-deep tile
    assert loop.count("S2UR") == 0


@needs_cuda_tools
def test_matmul_1_reads_no_shared_memory():
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    main = inspect_cli.inspect_config(compose_config("backend=cuda", "kernel=matmul_1")).main
    assert main.mix is not None and main.mix.total > 0
    assert main.mix.count("LDS") == 0 and main.mix.count("LDGSTS") == 0
    assert main.mix.count("LDG") > 0 and main.mix.ffma > 0


@needs_cuda_tools
def test_the_ladder_table_lists_every_step(tmp_path, capsys):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    assert inspect_cli.main(["--ladder", "sgemm", "--out", str(tmp_path), "backend=cuda"]) == 0
    table = (tmp_path / "sgemm-cuda.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| matmul_")]
    assert [row.split("|")[1].strip() for row in rows] == SGEMM_KERNELS
    assert not any("failed" in row for row in rows)
    for step in SGEMM_KERNELS:
        assert (tmp_path / f"{step}-cuda" / "summary.md").is_file()
    assert "matmul_9" in capsys.readouterr().out


def test_opencl_on_the_cpu_writes_the_build_log_and_says_what_the_driver_cannot_tell(tmp_path):
    assert inspect_cli.main(["--out", str(tmp_path), "backend=opencl", "backend.device_type=cpu",
                             "kernel=matmul_2", "size=64"]) == 0
    folder = tmp_path / "matmul_2-opencl"
    assert (folder / "build_log.txt").read_text().strip()
    summary = (folder / "summary.md").read_text()
    assert "reports no registers" in summary
    assert "| registers | — |" in summary  # absent, never 0


def test_the_command_line_takes_the_runners_overrides_and_refuses_bad_values(tmp_path):
    assert inspect_cli.main(["--out", str(tmp_path), "backend=opencl", "kernel=matmul_2",
                             "backend.device_type=cpu", "kernel.params.TS=7"]) == 1
    assert inspect_cli.main(["--out", str(tmp_path), "backend=cuda", "kernel=matmul_2",
                             "kernel.parms.TS=16"]) == 1  # a typo fails at composition


def test_a_run_records_the_inspection(tmp_path, monkeypatch):
    from runner.app import run

    monkeypatch.chdir(tmp_path)  # the sqlite store's artifacts go under ./mlruns
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose_config("backend.device_type=cpu", "kernel=matmul_2", "size=32",
                         "timing.repeats=3", f"tracking.uri={store}")
    assert run(cfg) > 0
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("gemmlab")
    (recorded,) = client.search_runs([experiment.experiment_id])
    names = {a.path for a in client.list_artifacts(recorded.info.run_id, "inspect")}
    assert {"inspect/summary.md", "inspect/build_log.txt"} <= names


SASS = """
        .text.k:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   LDS.128 R4, [R2] ;
        /*0020*/                   FFMA R10, R5, R7.reuse, R9 ;
        /*0030*/                   FFMA R12, R3, R7, R11 ;
        /*0040*/                   FFMA R14, R3, R5, R9 ;
        /*0050*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0060*/              @P0 BRA `(.L_x_0) ;
        /*0070*/                   EXIT ;
.L_x_1:
        /*0080*/                   BRA `(.L_x_1);
        /*0090*/                   NOP;
"""


def test_the_sass_reader_counts_the_loop_and_the_bank_rule():
    instructions = parse_sass(SASS)["k"]
    assert len(instructions) == 9  # the NOP left out
    loop = main_loop(instructions)
    assert [i.address for i in loop] == [0x10, 0x20, 0x30, 0x40, 0x50, 0x60]
    mix = InstructionMix.of(loop)
    assert mix.ffma == 3 and mix.width_count("LDS", 128) == 1 and mix.barriers == 1
    # R5, R7, R9: all odd, all read from the banks -> one conflict; R3, R7 (reuse), R11: R7
    # comes from the reuse cache; R3, R5, R9: all odd -> a second one.
    assert ffma_bank_conflicts(instructions) == 2


def test_inspect_applies_the_size_rules_a_run_would(tmp_path, capfd):
    """At 4096 NVIDIA's OpenCL takes matmul_9 with BK = 8 (3 stages of 16 do not fit): what
    is inspected is what runs, unless the command line pins a value the rule sets."""
    cfg, rule = inspect_cli.compose(["kernel=matmul_9", "backend=opencl", "size=4096"])
    assert "BK=8" in rule and cfg.kernel.params.BK == 8
    pinned, none = inspect_cli.compose(["kernel=matmul_9", "backend=opencl", "size=4096",
                                        "kernel.params.STAGES=2"])
    assert none is None and (pinned.kernel.params.BK, pinned.kernel.params.STAGES) == (16, 2)
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    assert inspect_cli.main(["--out", str(tmp_path), "kernel=matmul_9", "backend=cuda",
                             "size=1024"]) == 0
    out, _ = capfd.readouterr()
    assert "size rule of matmul_9 at 1024x1024x1024" in out
    summary = (tmp_path / "matmul_9-cuda" / "summary.md").read_text()
    assert "Parameters: BM=128 BN=64 BK=8 WM=64 WN=32 TM=8 TN=8 STAGES=3" in summary


TWO_LOOPS = """
        .text.k:
.L_x_0:
        /*0000*/                   LDGSTS.E.BYPASS.128 [R8], desc[UR4][R2.64] ;
        /*0010*/                   FFMA R10, R5, R6, R10 ;
        /*0020*/                   FFMA R12, R5, R7, R12 ;
        /*0030*/              @P0 BRA `(.L_x_0) ;
.L_x_1:
        /*0040*/                   ISETP.GE.AND P1, PT, R4, R9, PT ;
        /*0050*/                   SEL R2, R2, RZ, P1 ;
        /*0060*/                   LDGSTS.E.BYPASS.128 [R8], desc[UR4][R2.64] ;
        /*0070*/                   LDGSTS.E.BYPASS.128 [R8+0x10], desc[UR4][R2.64+0x10] ;
        /*0080*/                   FFMA R10, R5, R6, R10 ;
        /*0090*/                   FFMA R12, R5, R7, R12 ;
        /*00a0*/              @P1 BRA `(.L_x_1) ;
        /*00b0*/                   EXIT ;
"""


TENSOR_LOOP = """
        .text.k:
.L_x_0:
        /*0000*/                   LDS.64 R4, [R2] ;
        /*0010*/                   HMMA.1688.F32.TF32 R8, R4, R6, R8 ;
        /*0020*/                   HMMA.1688.F32.TF32 R12, R4, R7, RZ ;
        /*0030*/                   FADD R20, R12, R20 ;
        /*0040*/              @P0 BRA `(.L_x_0) ;
.L_x_1:
        /*0050*/                   LDS.64 R4, [R2] ;
        /*0060*/                   LDS.64 R6, [R2+0x8] ;
        /*0070*/                   STS.64 [R3], R4 ;
        /*0080*/              @P1 BRA `(.L_x_1) ;
        /*0090*/                   EXIT ;
"""


def test_a_tensor_core_steps_main_loop_is_the_one_with_its_products():
    """A step without FFMAs works in its tensor-core products (HMMA, HGMMA): its main loop is
    the loop that holds them, not the one with the most memory instructions, and they are
    counted as products, not as integer instructions."""
    loop = main_loop(parse_sass(TENSOR_LOOP)["k"])
    assert [i.address for i in loop] == [0x00, 0x10, 0x20, 0x30, 0x40]
    mix = InstructionMix.of(loop)
    assert mix.tensor == 2 and mix.ffma == 0 and mix.fp32_other == 1
    assert mix.integer_and_other == 0  # LDS is memory, BRA control


WGMMA_TMA_LOOP = """
        .text.k:
.L_x_0:
        /*0000*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4+0x30], R3 ;
        /*0010*/                   WARPGROUP.ARRIVE ;
        /*0020*/                   HGMMA.64x128x8.F32.TF32 R24, gdesc[UR8], R24 ;
        /*0030*/                   HGMMA.64x128x8.F32.TF32 R24, gdesc[UR12], R24, gsb0 ;
        /*0040*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0050*/                   SYNCS.ARRIVE.TRANS64.RED.A1T0 RZ, [UR4+0x60], RZ ;
        /*0060*/                   IADD3 R3, R3, 0x1, RZ ;
        /*0070*/              @P1 BRA `(.L_x_0) ;
.L_x_1:
        /*0080*/                   UTMALDG.2D [UR16], [UR6] ;
        /*0090*/                   UTMALDG.2D [UR24], [UR6+0x80] ;
        /*00a0*/                   SYNCS.ARRIVE.TRANS64 RZ, [UR4], R5 ;
        /*00b0*/              @P2 BRA `(.L_x_1) ;
        /*00c0*/                   EXIT ;
"""


def test_a_wgmma_steps_loop_shows_its_products_tma_copies_and_mbarrier_waits():
    """A warp-specialised wgmma step: the consumers' loop (the products) is the main loop; TMA
    copies are memory, mbarrier and warpgroup ordering their own row, not integer work."""
    functions = parse_sass(WGMMA_TMA_LOOP)["k"]
    loop = InstructionMix.of(main_loop(functions))
    assert loop.tensor == 2 and loop.tma == 0 and loop.async_order == 4
    assert loop.integer_and_other == 1  # the IADD3
    whole = InstructionMix.of(functions)
    assert whole.tma == 2 and whole.memory == 2 and whole.async_order == 5


def test_ffmas_that_move_their_accumulator_are_counted():
    # SASS: R10 <- R9, R12 <- R11, R14 <- R9 (all moved); TWO_LOOPS: R10 <- R10, R12 <- R12.
    assert ffma_moved_accumulators(parse_sass(SASS)["k"]) == 3
    assert ffma_moved_accumulators(parse_sass(TWO_LOOPS)["k"]) == 0
    assert InstructionMix.of(parse_sass(SASS)["k"]).moved_accumulators == 3


def test_the_main_loop_is_the_shortest_of_the_loops_with_the_most_ffmas():
    # A steady, unguarded copy of a loop body and a guarded copy for the last iterations: the
    # same FFMAs, and the guarded one has more copies and instructions but is not the hot one.
    loop = main_loop(parse_sass(TWO_LOOPS)["k"])
    assert [i.address for i in loop] == [0x00, 0x10, 0x20, 0x30]


@pytest.mark.parametrize("target", [
    # compile_only_cc is the target only where CuPy sees no GPU (else the GPU's own is)
    pytest.param(["backend=cuda", "backend.compile_only_cc=75"], marks=without_cuda_gpu),
    ["backend=opencl", "backend.device_type=cpu"]], ids=["sm_75", "cpu"])
def test_a_tensor_core_step_is_refused_for_a_target_without_tensor_cores(tmp_path, capfd, target):
    assert inspect_cli.main(["--out", str(tmp_path), "kernel=matmul_10", *target]) == 1
    out, err = capfd.readouterr()
    error = out + err
    assert "matmul_10 needs" in error and "Traceback" not in error
    assert not any(tmp_path.iterdir())  # nothing was compiled or written


def test_dynamic_shared_memory_counts_in_what_a_work_group_holds():
    """matmul_12's ring of stages is dynamic shared memory, asked for by its launch: ptxas
    reports 0 static bytes, and the inspection still shows what one block holds."""
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    cfg = compose_config("backend=cuda", "kernel=matmul_12")
    params = cfg.kernel.params
    ring = params.STAGES * (params.BM + 2 * params.BN) * params.BK * 4 + 1024  # its YAML's rule
    main = inspect_cli.inspect_config(cfg).main
    assert main.resources.local_memory_bytes == 0
    assert main.dynamic_local_bytes == ring and main.local_memory_bytes == ring
    assert f"{ring:,} ({ring:,} dynamic)" in inspect_cli.inspect_config(cfg).files["summary.md"]


def test_the_ladder_on_the_terminal_keeps_every_column_and_lists_refusals_below(capsys):
    """Refused steps are one word in the table and their reasons under it, so no column
    shrinks to nothing (the steps' names whole, every header whole)."""
    steps = [f"matmul_{i}" for i in range(1, 15)]
    why = "needs an NVIDIA GPU of compute capability 8.0 or later " * 3
    rows, refused = [], []
    for step in steps:
        if step in ("matmul_10", "matmul_14"):
            rows.append(inspect_cli.ladder_row(step, failure=f"{step} {why}", outcome="refused"))
            refused.append((step, "refused", f"{step} {why}"))
        else:
            rows.append([step, "128", "0/0", "8,192", "2", "1,234", "55%", "80%", "—",
                         "12 (4)", "8 (8)", "—", "2", "0"])
    inspect_cli.print_ladder("the sgemm ladder · opencl · a CPU", rows, refused)
    out = capsys.readouterr().out
    table = out.split("└")[0]
    assert all(f"│ {step} " in table for step in steps), table
    assert "│ matmul_10 │ refused │" in table.replace("  ", " ").replace("  ", " ")
    assert why.strip() not in table
    assert all(header in table for header in inspect_cli.SHORT_COLUMNS)
    below = out.split("┘")[1]
    assert f"matmul_10 refused: {why.strip()}" in below
    assert f"matmul_14 refused: {why.strip()}" in below


def test_a_ladder_with_refused_steps_only_exits_zero_and_the_page_keeps_the_reasons(tmp_path):
    """On the CPU the tensor-core steps are refused (the spec doing its job), not failures."""
    assert inspect_cli.main(["--ladder", "sgemm", "--out", str(tmp_path), "backend=opencl",
                             "backend.device_type=cpu", "size=64"]) == 0
    page = (tmp_path / "sgemm-opencl.md").read_text()
    assert "| matmul_12 | refused: matmul_12 has no opencl source" in page
