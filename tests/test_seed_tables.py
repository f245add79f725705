"""The seeds' tables: every row maps to a valid configuration of ours at the table's sizes, each
preset composes and sweeps exactly the table's rows, and a page is built from real CPU runs."""

import pytest
from conftest import compose_config
from hydra.core.override_parser.overrides_parser import OverridesParser
from mlflow.tracking import MlflowClient

import runner.app
from runner.app import run
from runner.config.spec import ProblemSize, plan_kernel
from runner.results import seed_tables

TABLES = seed_tables.table_names()
ROWS = [(name, row.id) for name in TABLES for row in seed_tables.load_table(name).rows]


def test_the_four_tables_are_there():
    assert TABLES == ["cuda_learning_matmul", "cuda_learning_transpose", "mygemm_progression",
                      "prefetch_tiling"]


@pytest.mark.parametrize("name,row_id", ROWS)
def test_row_composes_to_its_kernel_and_passes_the_spec(name, row_id):
    """The row's option picks the row's kernel with exactly the row's tiling values (the
    kernel's defaults elsewhere), and those pass the allowed values and every constraint at each
    of the table's sizes."""
    table = seed_tables.load_table(name)
    row = table.row(row_id)
    cfg = compose_config(f"+experiment={table.experiment}", f"seed_row/{name}={row_id}")
    assert cfg.kernel.name == row.kernel
    assert dict(cfg.kernel.params) == seed_tables.full_params(row)
    assert cfg.tracking.experiment == f"seed_{name}"
    for size in table.sizes:
        plan = plan_kernel(cfg.kernel, ProblemSize(size, size, size))  # raises when refused
        assert plan.params == seed_tables.full_params(row)


def test_a_row_outside_the_spec_is_refused():
    """The check above can fail: the same composition with a value the kernel refuses."""
    from runner.errors import RunError

    cfg = compose_config("+experiment=seed_prefetch_tiling",
                         "seed_row/prefetch_tiling=bm128_bk8_bn128_rm8_rn8",
                         "kernel.params.BK=64")
    with pytest.raises(RunError, match="BK=64"):
        plan_kernel(cfg.kernel, ProblemSize(4096, 4096, 4096))


@pytest.mark.parametrize("name", TABLES)
def test_preset_sweeps_every_row_at_the_tables_sizes(name):
    table = seed_tables.load_table(name)
    cfg = compose_config(f"+experiment={table.experiment}", with_hydra=True)
    params = cfg.hydra.sweeper.params
    assert set(params) == {f"seed_row/{name}", "size"}
    swept = {}
    for override in OverridesParser.create().parse_overrides(
            [f"{key}={value}" for key, value in params.items()]):
        swept[override.key_or_group] = ([str(v) for v in override.sweep_string_iterator()]
                                        if override.is_sweep_override()
                                        else [str(override.value())])
    assert swept[f"seed_row/{name}"] == [r.id for r in table.rows]
    assert [int(s) for s in swept["size"]] == table.sizes
    assert cfg.timing.warmup == table.timing["warmup"]
    assert cfg.timing.repeats == table.timing["repeats"]
    # The GPU commands the pages are meant for compose too.
    last = f"seed_row/{name}={table.rows[-1].id}"
    cuda = compose_config(f"+experiment={table.experiment}", "backend=cuda", last)
    assert (cuda.backend.name, cuda.kernel.name) == ("cuda", table.rows[-1].kernel)
    nvidia = compose_config(f"+experiment={table.experiment}", "backend=opencl",
                            "backend.platform=NVIDIA", last)
    assert (nvidia.backend.platform, nvidia.kernel.name) == ("NVIDIA", table.rows[-1].kernel)


def test_generated_configs_are_up_to_date():
    """conf/seed_row/ and the presets are what --write-configs makes of conf/seeds/."""
    for name in TABLES:
        table = seed_tables.load_table(name)
        preset = seed_tables.EXPERIMENTS_DIR / f"{table.experiment}.yaml"
        assert preset.read_text() == seed_tables.experiment_config(table), preset
        folder = seed_tables.ROWS_DIR / name
        assert sorted(p.stem for p in folder.glob("*.yaml")) == sorted(r.id for r in table.rows)
        for row in table.rows:
            path = folder / f"{row.id}.yaml"
            assert path.read_text() == seed_tables.row_config(table, row), path


def test_published_figures_are_the_seeds():
    """A few numbers read off the seed documents, and the % worked out from them."""
    transpose = seed_tables.load_table("cuda_learning_transpose")
    assert transpose.row("matrixTranspos_3").published == {"rtx3060": 232.529, "v100": 1130.28}
    matmul = seed_tables.load_table("cuda_learning_matmul")
    v100 = next(c for c in matmul.columns if c.id == "v100")
    assert (v100.size, v100.vendor) == (8192, 16250.4)
    pct = seed_tables.published_pct(matmul, matmul.row("matrixMul_4"), v100)
    assert pct == pytest.approx(100 * 15816.1 / 16250.4)
    prefetch = seed_tables.load_table("prefetch_tiling")
    best = prefetch.row("bm128_bk8_bn128_rm8_rn8")
    assert best.params == {"BM": 128, "BK": 8, "BN": 128, "TM": 8, "TN": 8, "LOAD_SPLIT": 1}
    assert best.published == {"v100": {"rate": 14167.1, "pct": 93.5}}
    mygemm = seed_tables.load_table("mygemm_progression")
    assert mygemm.columns == [] and "no figures published in the seed" in mygemm.published_note
    assert all(not row.published for row in mygemm.rows)


@pytest.fixture(scope="module")
def transpose_runs(tmp_path_factory):
    """Two rows of the transpose table run on the CPU at 64 x 64 through the preset (the plain
    copy, the table's reference, and matrixTranspos_3), plus a refused row."""
    root = tmp_path_factory.mktemp("seeds")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    common = ["+experiment=seed_cuda_learning_transpose", "backend.device_type=cpu", "size=64",
              "timing.warmup=0", "timing.repeats=3", f"tracking.uri={uri}"]
    for row in ("matrixCopy_1", "matrixTranspos_3"):
        assert run(compose_config(*common, f"seed_row/cuda_learning_transpose={row}")) > 0
    with pytest.MonkeyPatch.context() as patch:  # as the preset's sweep job: recorded, refused
        patch.setattr(runner.app, "in_sweep", lambda: True)
        assert run(compose_config(*common, "seed_row/cuda_learning_transpose=matrixTranspos_2",
                                  "kernel.params.STRIDE=64")) is None  # STRIDE must divide TILE
    return uri


def test_page_from_cpu_runs(transpose_runs, tmp_path):
    uri = transpose_runs
    files = seed_tables.main(["cuda_learning_transpose", "--uri", uri, "--out", str(tmp_path)])
    assert files == [tmp_path / "cuda_learning_transpose.md",
                     tmp_path / "cuda_learning_transpose.png"]
    page = files[0].read_text()
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name(
        "seed_cuda_learning_transpose").experiment_id])
    measured = {r.data.params["kernel.name"]: r for r in runs if r.info.status == "FINISHED"}
    assert set(measured) == {"copy_1", "transpose_3"}
    device = measured["copy_1"].data.tags["device.name"]
    # The seed's figures, with the % of its own plain copy worked out from them.
    assert "| matrixTranspos_3 (tile padded by one column against bank conflicts) | " \
           "`transpose_3` [5] | 233 (94.7%) | 1,130 (114.1%) |" in page
    assert "| matrixCopy_1 (普通矩阵复制, plain copy) | `copy_1` [1] | 246 (100.0%) | " \
           "991 (100.0%) |" in page
    # Ours, beside them: the rate, % of our copy_1 and % of the device copy in the same run.
    gbps = measured["transpose_3"].data.metrics["bw/gbps"]
    ratio = 100 * gbps / measured["copy_1"].data.metrics["bw/gbps"]
    # No % of the device copy where its baseline was disturbed by other work (a busy host).
    vendor = measured["transpose_3"].data.metrics.get("perf/pct_of_vendor")
    assert (vendor is None) == ("vendor.unusable" in measured["transpose_3"].data.tags)
    rate = f"{gbps:,.0f}" if gbps >= 100 else f"{gbps:.3g}"
    assert f"`transpose_3` [5] | 233 (94.7%) | 1,130 (114.1%) | {rate} ({ratio:.1f}%; " \
           f"{'—' if vendor is None else f'{vendor:.1f}%'}) |" in page
    assert f"ours: opencl, {device.removeprefix('NVIDIA ')}, 64" in page
    assert "| matrixTranspos_1 (naive) | `transpose_1` [3] | 69.5 (28.3%) | 140 (14.2%) | " \
           "not measured |" in page
    assert "| matrixTranspos_2 (shared memory, coalesced reads and writes) | `transpose_2` [4] " \
           "| 213 (86.7%) | 473 (47.8%) | not measured |" in page, \
           "a run with other parameters is no row's measurement"
    assert "1 other run(s) of `seed_cuda_learning_transpose` match no row" in page
    # Provenance: device, driver, date, runner and commit, both commands.
    assert f"## Ours: opencl on {device}" in page
    for line in ("- driver: ", "- date (UTC) of the newest run: 20", "- runner: 0.", "commit(s) ",
                 "- vendor baseline: opencl device-to-device copy",
                 f"by `python -m runner.seed_tables cuda_learning_transpose --uri {uri} "
                 f"--out {tmp_path}`", "- measured by:\n  - `python -m runner "):
        assert line in page, line
    assert "![cuda-learning's copy and transpose table" in page
    assert files[1].stat().st_size > 10_000


def test_no_runs_is_one_line_that_says_how_to_measure_and_writes_nothing(tmp_path, capsys):
    """A table with no runs fails (exit 1, one `gemmlab: error:` line) rather than replacing a
    page with an empty table; a store that does not exist is not created by reading it."""
    uri = f"sqlite:///{tmp_path / 'empty.db'}"
    out = tmp_path / "pages"
    with pytest.raises(SystemExit) as failed:
        seed_tables.main(["mygemm_progression", "--uri", uri, "--out", str(out)])
    message = str(failed.value.code)
    assert message.startswith("gemmlab: error: ") and "\n" not in message
    assert "python -m runner -m +experiment=seed_mygemm_progression backend=cuda" in message
    assert not out.exists() and not (tmp_path / "empty.db").exists()


def test_pages_go_to_the_working_directory_unless_out_is_given(transpose_runs, tmp_path,
                                                               monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    files = seed_tables.main(["cuda_learning_transpose", "--uri", transpose_runs])
    assert files[0] == seed_tables.recorded.out_folder(None) / "cuda_learning_transpose.md"
    assert files[0].parent.resolve() == (tmp_path / "gemmlab-pages").resolve()
    assert "gemmlab-pages/" in capsys.readouterr().out


def test_a_cpu_page_names_the_vendor_its_runs_were_compared_with(tmp_path):
    """A GFLOPS table published against cuBLAS, measured on the CPU: our columns are % of the
    library the runs timed (numpy), not "% of cuBLAS SGEMM"."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert run(compose_config("+experiment=seed_mygemm_progression", "backend.device_type=cpu",
                              "seed_row/mygemm_progression=myGEMM1", "size=64", "timing.warmup=0",
                              "timing.repeats=3", f"tracking.uri={uri}")) > 0
    (page, *_) = seed_tables.main(["mygemm_progression", "--uri", uri, "--out", str(tmp_path)])
    text = page.read_text()
    ours = next(line for line in text.splitlines() if line.startswith("| seed row"))
    assert "ours: opencl" in ours and "GFLOPS (% of numpy" in ours
    assert "% of cuBLAS" not in ours.split("ours:", 1)[1]
    assert "| numpy" in text, "the vendor's own row is named after the library"


def test_a_table_that_does_not_exist_is_one_line_naming_the_tables(tmp_path):
    with pytest.raises(SystemExit) as failed:
        seed_tables.main(["nosuch", "--uri", f"sqlite:///{tmp_path / 'none.db'}"])
    message = str(failed.value.code)
    assert message.startswith("gemmlab: error: no seed table 'nosuch' (allowed: "), message
    assert all(name in message for name in TABLES) and "\n" not in message
