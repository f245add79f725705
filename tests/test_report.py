"""Results pages are built from MLflow records: a table row per run, failures listed, plots,
and the runs selected by experiment, sweep (parent run), backend and device."""

import re

import mlflow
import pytest
from conftest import compose_config
from mlflow.entities import Metric, Param, Run, RunData, RunTag
from mlflow.tracking import MlflowClient

import runner.app
from runner.app import run
from runner.results.report import as_read_from, build_report
from runner.results.report import main as report_main


def _common(store: str, experiment: str = "ladder") -> list[str]:
    return ["backend.device_type=cpu", "timing.repeats=3", "timing.warmup=0",
            f"tracking.uri={store}", f"tracking.experiment={experiment}"]


def _run_ids(store: str, experiment: str) -> set[str]:
    client = MlflowClient(tracking_uri=store)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return set()
    return {r.info.run_id for r in client.search_runs([found.experiment_id], max_results=1000)}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Real CPU runs in one experiment: a sweep (a parent run tagged gemmlab.sweep and three
    children, one of them failed), a run outside the sweep, and a CUDA run that fails here."""
    root = tmp_path_factory.mktemp("report")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    common = _common(uri)
    assert run(compose_config("kernel=matmul_1", "size=48", *common)) > 0  # not in the sweep
    before = _run_ids(uri, "ladder")
    mlflow.set_tracking_uri(uri)
    with mlflow.start_run(run_name="sweep ladder test",
                          tags={"gemmlab.sweep": "true"}) as parent:
        parent_id = parent.info.run_id
    assert run(compose_config("kernel=matmul_1", "size=40", *common)) > 0
    assert run(compose_config("kernel=matmul_2", "size=40", *common)) > 0
    assert run(compose_config("kernel=matmul_2", "m=33", "n=17", "k=9", *common)) > 0
    with pytest.MonkeyPatch.context() as patch:  # as a sweep's job: a refused point is recorded
        patch.setattr(runner.app, "in_sweep", lambda: True)
        assert run(compose_config("kernel=matmul_2", "size=40", "kernel.params.TS=3",
                                  *common)) is None
    client = MlflowClient(tracking_uri=uri)
    children = _run_ids(uri, "ladder") - before - {parent_id}
    assert len(children) == 4
    for child in children:
        client.set_tag(child, "mlflow.parentRunId", parent_id)
    from runner.backends.cuda import gpu_count

    if not gpu_count():  # a CUDA run that fails for want of a GPU, outside the sweep
        assert run(compose_config("backend=cuda", "kernel=matmul_2", "size=40",
                                  *common[1:])) is None  # device_type is OpenCL's key
    return uri, parent_id


def _page(out, stem: str) -> str:
    return (out / f"{stem}.md").read_text()


def test_report_page_from_recorded_runs(store, tmp_path):
    uri, parent_id = store
    out = tmp_path / "pages"
    report_main(["--experiment", "ladder", "--uri", uri, "--out", str(out)])
    page = _page(out, "ladder")
    assert "| matmul_1 | 40x40x40 |" in page
    assert "| matmul_1 | 48x48x48 |" in page
    assert "| matmul_2 | 40x40x40 |" in page
    assert "| matmul_2 | 33x17x9 |" in page
    assert "TS=3 is not an allowed value" in page, "failed runs are listed with their reason"
    assert "numpy" in page and "driver:" in page and "command(s):" in page
    assert f"by `python -m runner.report --experiment ladder --uri {uri}`" in page
    assert str(out) not in page, "where the page was written is no part of its command"
    # TS=3 is refused where the runner tags refusals (gemmlab.status), failed where it does not.
    assert re.search(rf"sweep `sweep ladder test` \(run `{parent_id}`\): 3 ok, "
                     r"(0 refused, 1 failed|1 refused, 0 failed), 0 cached", page)
    assert "| ? |" not in page, "the sweep's parent run is no row of its own"
    assert (out / "ladder-rate.png").stat().st_size > 10_000
    assert "![ladder: rate against size](ladder-rate.png)" in page


@pytest.mark.parametrize("how", ["id", "name"])
def test_sweep_selects_only_its_children(store, tmp_path, how):
    uri, parent_id = store
    out = tmp_path / "pages"
    sweep = parent_id if how == "id" else "sweep ladder test"
    files = report_main(["--sweep", sweep, "--uri", uri, "--out", str(out)])  # no --experiment
    assert files[0] == out / f"sweep-{parent_id[:8]}.md"
    page = files[0].read_text()
    assert page.startswith("# Benchmark: sweep ladder test")
    assert "| matmul_1 | 40x40x40 |" in page and "| matmul_2 | 33x17x9 |" in page
    assert "48x48x48" not in page, "a run outside the sweep is left out"
    assert "TS=3 is not an allowed value" in page
    assert "needs an NVIDIA GPU" not in page


def test_backend_and_device_select(store, tmp_path):
    uri, _ = store
    out = tmp_path / "pages"
    report_main(["--experiment", "ladder", "--uri", uri, "--out", str(out),
                 "--backend", "opencl", "--name", "opencl"])
    page = _page(out, "opencl")
    assert "| matmul_1 | 40x40x40 |" in page
    assert "needs an NVIDIA GPU" not in page
    client = MlflowClient(tracking_uri=uri)
    device = next(r.data.tags["device.name"] for r in client.search_runs(
        [client.get_experiment_by_name("ladder").experiment_id]) if "device.name" in r.data.tags)
    word = device.split()[0].swapcase()  # a substring, in the other case
    report_main(["--experiment", "ladder", "--uri", uri, "--out", str(out),
                 "--device", word, "--name", "device"])
    assert f"## opencl on {device}" in _page(out, "device")
    with pytest.raises(SystemExit, match="no runs match"):
        report_main(["--experiment", "ladder", "--uri", uri, "--out", str(out),
                     "--device", "no such device"])
    from runner.backends.cuda import gpu_count

    if not gpu_count():  # the store holds one failed CUDA run
        report_main(["--experiment", "ladder", "--uri", uri, "--out", str(out),
                     "--backend", "cuda", "--name", "cuda"])
        cuda = _page(out, "cuda")
        assert "needs an NVIDIA GPU" in cuda
        assert "| matmul_1 |" not in cuda, "no OpenCL rows under --backend cuda"


def _as_backend(run: Run, backend: str, scale: float) -> Run:
    """The same run relabelled as another backend with scaled rates (a stand-in for a CUDA run,
    which this machine cannot make) and the registers a GPU compiler would report."""
    metrics = dict(run.data.metrics)
    for key in ("perf/gflops", "bw/gbps", "perf/pct_of_vendor", "perf/pct_of_reference"):
        if key in metrics:
            metrics[key] *= scale
    metrics["kernel/registers"] = 32.0
    metrics["kernel/spill_bytes"] = 0.0
    params = {**run.data.params, "backend.name": backend}
    return Run(run.info, RunData(metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
                                 params=[Param(k, v) for k, v in params.items()],
                                 tags=[RunTag(k, v) for k, v in run.data.tags.items()]))


def _sweep_runs(uri: str, parent_id: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    return client.search_runs([client.get_experiment_by_name("ladder").experiment_id],
                              f"tags.`mlflow.parentRunId` = '{parent_id}'")


def test_build_report_writes_every_plot(store, tmp_path):
    uri, parent_id = store
    runs = _sweep_runs(uri, parent_id)
    runs += [_as_backend(r, "cuda", 1.5) for r in runs if r.info.status == "FINISHED"]
    files = build_report(runs, "both backends", tmp_path, uri)
    assert files[0] == tmp_path / "both-backends.md"
    names = [f.name for f in files[1:]]
    assert names == ["both-backends-rate.png", "both-backends-ladder.png",
                     "both-backends-resources.png", "both-backends-backends.png"]
    page = files[0].read_text()
    for f in files[1:]:
        assert f.stat().st_size > 10_000, f"{f.name} is (nearly) empty"
        assert f"]({f.name})" in page, f"{f.name} is embedded in the page"
    assert "| cuda 40 |" not in page and "| cuda 40x40x40 |" in page  # odd sizes: full labels


def test_build_report_with_only_failed_runs_or_one_run(store, tmp_path):
    uri, parent_id = store
    runs = _sweep_runs(uri, parent_id)
    failed = [r for r in runs if r.info.status == "FAILED"]
    assert failed
    files = build_report(failed, "only failed", tmp_path / "failed", uri)
    assert files == [tmp_path / "failed" / "only-failed.md"], "no plot without a measurement"
    assert "TS=3 is not an allowed value" in files[0].read_text()
    one = [r for r in runs if r.info.status == "FINISHED"][:1]
    files = build_report(one, "one run", tmp_path / "one", uri)
    # Registers and spills: drawn only where the driver reports them (a CPU runtime may not).
    assert [f.name for f in files][:3] == ["one-run.md", "one-run-rate.png", "one-run-ladder.png"]
    assert all(f.stat().st_size > 5_000 for f in files[1:])


def test_rate_plot_steps_look_different_beyond_ten():
    """matplotlib has ten colours; the SGEMM ladder has 12 steps."""
    from runner.results.report_plots import series_style

    styles = [series_style(i) for i in range(25)]
    assert len(set(styles)) == 25
    assert series_style(0)[0] == series_style(10)[0] and series_style(0) != series_style(10)


def test_rate_plot_joins_square_sizes_only(store, tmp_path, monkeypatch):
    """A shape that is not square (33x17x9 beside 40) is an open marker, not a point on the
    step's line: a line would jump between two sizes that are not a sequence."""
    import runner.results.report_plots as plots
    from runner.results.report_page import best_per_cell

    uri, parent_id = store
    runs = [r for r in _sweep_runs(uri, parent_id)
            if r.info.status == "FINISHED" and r.data.params["kernel.name"] == "matmul_2"]
    assert {(r.data.params["M"], r.data.params["K"]) for r in runs} == {("40", "40"), ("33", "9")}
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or path)
    plots.plot_rates("odd", best_per_cell(runs), tmp_path / "odd.png")
    lines = figures[0].axes[0].get_lines()
    step = [line for line in lines if line.get_label() == "matmul_2"]
    assert len(step) == 1 and step[0].get_xdata() == pytest.approx([40.0])
    odd_x = (33 * 17 * 9) ** (1 / 3)
    apart = [line for line in lines if line.get_linestyle() == "None" and line.get_xdata().size
             and abs(line.get_xdata()[0] - odd_x) < 1e-6]
    assert apart and apart[0].get_markerfacecolor() == "none"
    assert "open: not square" in [line.get_label() for line in lines]


@pytest.mark.parametrize("recorded, expected", [
    ("python -m runner -m +experiment=sgemm_ladder backend=cuda "
     "tracking.uri=sqlite:////root/out/sgemm.db",
     "python -m runner -m +experiment=sgemm_ladder backend=cuda tracking.uri=sqlite:///sgemm.db"),
    ("python -m runner ++tracking.uri=sqlite:////tmp/x.db kernel=matmul_2",
     "python -m runner ++tracking.uri=sqlite:///sgemm.db kernel=matmul_2"),
    ("python -m runner kernel=matmul_2", "python -m runner kernel=matmul_2"),
    ("python -m runner tracking.experiment=a", "python -m runner tracking.experiment=a"),
])
def test_page_commands_name_the_store_the_page_read(recorded, expected):
    """A store recorded on another machine and copied here is named as the reader's command
    would name it, never by the path on the machine that ran it."""
    assert as_read_from(recorded, "sqlite:///sgemm.db") == expected


def test_no_arguments_report_the_latest_sweep_and_a_short_id_names_it(store, tmp_path,
                                                                       monkeypatch, capsys):
    uri, parent_id = store
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlflow.db").write_bytes(open(uri.removeprefix("sqlite:///"), "rb").read())
    files = report_main([])  # the default store in the working directory, its latest sweep
    assert files[0].resolve() == tmp_path / "gemmlab-pages" / f"sweep-{parent_id[:8]}.md"
    assert files[0].read_text().startswith("# Benchmark: sweep ladder test")
    assert "gemmlab-pages/" in capsys.readouterr().out
    short = report_main(["--sweep", parent_id[:8], "--uri", uri, "--out", str(tmp_path / "s")])
    assert short[0] == tmp_path / "s" / f"sweep-{parent_id[:8]}.md"


def test_no_store_or_no_sweep_is_one_line_and_writes_nothing(tmp_path):
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    with pytest.raises(SystemExit) as failed:
        report_main(["--uri", missing, "--out", str(tmp_path / "pages")])
    assert str(failed.value.code).startswith("gemmlab: error: no MLflow store at")
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "pages").exists()
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    from runner.record.store import ensure_store

    ensure_store(empty)
    with pytest.raises(SystemExit, match="gemmlab: error: no sweep in"):
        report_main(["--uri", empty, "--out", str(tmp_path / "pages")])
    assert not (tmp_path / "pages").exists()


def _synthetic_ladder(uri: str) -> list:
    """A CUDA SGEMM ladder at 4096 as an H100 records it (no GPU needed to write the records):
    FP32 steps under cuBLAS SGEMM, a TF32 step far above it and two 3xTF32 steps, the
    tensor-core steps also compared with cuBLAS in TF32 mode."""
    from runner.record.tracking import experiment_for

    client = MlflowClient(uri)
    experiment = experiment_for(uri, "synthetic_ladder")
    steps = [("matmul_8", "fp32", 41_000.0), ("matmul_9", "fp32", 51_000.0),
             ("matmul_10", "tf32", 128_000.0), ("matmul_11", "tf32x3", 65_000.0),
             ("matmul_12", "tf32x3", 91_000.0)]
    for kernel, precision, gflops in steps:
        run = client.create_run(experiment, run_name=kernel)
        metrics = {"perf/gflops": gflops, "vendor/gflops": 51_500.0,
                   "perf/pct_of_vendor": 100 * gflops / 51_500.0}
        if precision != "fp32":
            metrics["vendor_tf32/gflops"] = 147_000.0
        client.log_batch(
            run.info.run_id,
            metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
            params=[Param(k, v) for k, v in {
                "backend.name": "cuda", "kernel.name": kernel, "kernel.precision": precision,
                "M": "4096", "N": "4096", "K": "4096"}.items()],
            tags=[RunTag(k, v) for k, v in {
                "gemmlab.status": "ok", "gemmlab.operation": "sgemm", "device.name": "H100",
                "vendor.name": "cuBLAS SGEMM", "vendor_tf32.name": "cuBLAS TF32"}.items()])
        client.set_terminated(run.info.run_id)
    return client.search_runs([experiment])


def test_ladder_bars_show_their_precision_and_tf32_steps_their_vendor_line(tmp_path,
                                                                          monkeypatch):
    import runner.results.report_plots as plots
    from runner.results.report_page import best_per_cell

    runs = _synthetic_ladder(f"sqlite:///{tmp_path / 'mlflow.db'}")
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or path)
    plots.plot_ladder("ladder", best_per_cell(runs), tmp_path / "ladder.png")
    ax = figures[0].axes[0]
    bars = {tick.get_text(): bar for tick, bar in zip(ax.get_xticklabels(), ax.patches)}
    assert list(bars) == ["matmul_8", "matmul_9", "matmul_10", "matmul_11", "matmul_12"]
    looks = {kernel: (bar.get_facecolor(), bar.get_hatch() or "") for kernel, bar in bars.items()}
    assert looks["matmul_8"] == looks["matmul_9"]
    assert len({looks["matmul_9"], looks["matmul_10"], looks["matmul_11"]}) == 3
    assert looks["matmul_11"] == looks["matmul_12"]
    assert looks["matmul_10"][1], "the reduced-precision step is hatched"
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["FP32", "TF32, reduced precision", "3xTF32, FP32-accurate",
                      "cuBLAS SGEMM", "cuBLAS TF32"]
    fp32_vendor = [line for line in ax.get_lines() if line.get_label() == "cuBLAS SGEMM"]
    assert fp32_vendor and fp32_vendor[0].get_ydata()[0] == pytest.approx(51_500.0)
    tf32_vendor = [c for c in ax.collections if c.get_label() == "cuBLAS TF32"]
    segments = [segment for c in tf32_vendor for segment in c.get_segments()]
    assert len(segments) == 1, "one line across the three tensor-core steps"
    (x0, y0), (x1, y1) = segments[0]
    assert y0 == y1 == pytest.approx(147_000.0)
    assert x0 < 2 < 4 < x1 and x0 > 1, "from matmul_10 to matmul_12, not over the FP32 steps"
    assert ax.get_ylim()[1] > 147_000.0


def test_an_fp32_ladder_draws_no_tf32_line(tmp_path, monkeypatch):
    import runner.results.report_plots as plots
    from runner.results.report_page import best_per_cell

    runs = [r for r in _synthetic_ladder(f"sqlite:///{tmp_path / 'mlflow.db'}")
            if r.data.params["kernel.precision"] == "fp32"]
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or path)
    plots.plot_ladder("ladder", best_per_cell(runs), tmp_path / "ladder.png")
    ax = figures[0].axes[0]
    assert not ax.collections
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["FP32", "cuBLAS SGEMM"]
    assert build_report(runs, "fp32 only", tmp_path / "page", "sqlite:///x.db")[2].name == \
        "fp32-only-ladder.png"


def test_the_page_sets_each_step_against_its_pipes_recorded_ceiling(tmp_path):
    from runner import ceiling
    from runner.results.runs import ceilings, load_runs

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _synthetic_ladder(uri)
    ceiling.record({"device": "H100", "driver": "NVIDIA 580", "ffma_tflops": 63.0,
                    "ffma_tflops_at_clock": 66.9, "mma_tf32_tflops": 320.0,
                    "wgmma_tf32_tflops": 400.0, "clock_mhz": 1980.0}, uri, "synthetic_ladder")
    recorded = ceilings(uri, "synthetic_ladder")
    assert recorded["H100"]["ceiling/wgmma_tf32_tflops"] == 400.0
    runs = load_runs(uri, "synthetic_ladder")
    assert len(runs) == 5, "the ceilings run is no step of the ladder"
    page, *_ = build_report(runs, "ladder", tmp_path / "pages", uri, ceilings=recorded)
    text = page.read_text()
    assert "## Against the ceilings: cuda on H100, 4096x4096x4096" in text
    assert "FFMA 63.0, mma.sync TF32 320.0, wgmma TF32 400.0" in text
    assert "| matmul_9 | fp32 | 51,000 | 81.0 | — | — | — |" in text  # 51.0 of 63.0 TFLOPS
    assert "| matmul_10 | tf32 | 128,000 | — | 40.0 | 32.0 | 87.1 |" in text  # cuBLAS TF32 147
    # 3xTF32 against a third of each: 320/3, 400/3 and cuBLAS TF32's 147/3
    assert "| matmul_12 | tf32x3 | 91,000 | — | 85.3 | 68.2 | 185.7 |" in text


def test_a_page_without_recorded_ceilings_has_no_ceiling_section(tmp_path):
    from runner.results.runs import ceilings, load_runs

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _synthetic_ladder(uri)
    assert ceilings(uri, "synthetic_ladder") == {}
    page, *_ = build_report(load_runs(uri, "synthetic_ladder"), "ladder", tmp_path / "pages",
                            uri, ceilings={})
    assert "Against the ceilings" not in page.read_text()


# --- the commands' own arguments: one line each, as the runner says it ---

def _one_line(failed) -> str:
    message = str(failed.value.code)
    assert message.startswith("gemmlab: error: ") and "\n" not in message, message
    return message


@pytest.mark.parametrize("uri, suggested", [("x.db", "--uri sqlite:///x.db"),
                                            ("runs", "--uri sqlite:///mlflow.db")])
def test_a_uri_without_a_scheme_is_one_line_with_the_sqlite_form(tmp_path, monkeypatch, uri,
                                                                 suggested):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as failed:
        report_main(["--uri", uri])
    message = _one_line(failed)
    assert f"--uri {uri}: no scheme" in message and suggested in message
    assert not any(tmp_path.iterdir()), "no store, no lock, no pages"


def test_an_unknown_uri_scheme_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as failed:
        report_main(["--uri", "nosuchscheme://nowhere"])
    assert "cannot read the MLflow store at --uri nosuchscheme://nowhere" in _one_line(failed)


def test_an_out_folder_that_cannot_be_made_is_one_line(store, tmp_path):
    store, _ = store
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    with pytest.raises(SystemExit) as failed:
        report_main(["--experiment", "ladder", "--uri", store, "--out", str(blocker / "pages")])
    message = _one_line(failed)
    assert f"--out {blocker / 'pages'}: cannot write" in message
    assert "allowed: a folder this user can create and write" in message


@pytest.mark.parametrize("module", ["report", "seed_tables", "tuning"])
def test_usage_names_the_command_a_user_types(module, capsys):
    from importlib import import_module

    with pytest.raises(SystemExit):
        import_module(f"runner.results.{module}").main(["--help"])
    assert capsys.readouterr().out.startswith(f"usage: python -m runner.{module} ")


def test_the_tables_carry_the_headline_reference_clock_hygiene_and_commit(tmp_path,
                                                                         monkeypatch):
    """A TF32 step is shown against cuBLAS TF32 (not its 770% of cuBLAS SGEMM), an FP32 one
    against cuBLAS SGEMM, each row with its SM clock, what was not clean and its commit; the
    rate plot draws cuBLAS TF32 beside cuBLAS SGEMM."""
    import runner.results.report_plots as plots
    from runner.results.report_page import best_per_cell

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    from runner.record.tracking import experiment_for

    experiment = experiment_for(uri, "headline")
    rows = [("matmul_9", "fp32", 51_000.0, {"perf/pct_of_vendor": 99.0}, "clean", "none"),
            ("matmul_13", "tf32", 397_645.0, {"perf/pct_of_vendor": 770.0,
                                              "perf/pct_of_vendor_tf32": 98.3,
                                              "vendor_tf32/gflops": 404_500.0,
                                              "energy/gflops": 371_000.0, "energy/power_w": 690.0,
                                              "energy/gflops_per_watt": 537.7,
                                              "vendor_energy/power_w": 610.0,
                                              "vendor_energy/gflops_per_watt": 80.1,
                                              "perf/x_vendor_per_joule": 6.713,
                                              "vendor_tf32_energy/gflops_per_watt": 560.2,
                                              "perf/x_vendor_tf32_per_joule": 0.9598},
             "clean", "sw_power_cap")]
    for kernel, precision, gflops, metrics, hygiene, reasons in rows:
        run = client.create_run(experiment, run_name=kernel)
        client.log_batch(
            run.info.run_id,
            metrics=[Metric(k, v, 0, 0) for k, v in {
                "perf/gflops": gflops, "vendor/gflops": 51_600.0, "gpu/sm_clock_mhz": 1890.0,
                **metrics}.items()],
            params=[Param(k, v) for k, v in {
                "backend.name": "cuda", "kernel.name": kernel, "kernel.precision": precision,
                "M": "4096", "N": "4096", "K": "4096"}.items()],
            tags=[RunTag(k, v) for k, v in {
                "gemmlab.status": "ok", "gemmlab.operation": "sgemm", "device.name": "H100",
                "vendor.name": "cuBLAS SGEMM (CuPy, TF32 off)",
                "vendor_tf32.name": "cuBLAS TF32 (CuPy, CUBLAS_COMPUTE_32F_FAST_TF32)",
                "gpu.hygiene": hygiene, "gpu.clock_reasons": reasons,
                "gemmlab.git_commit": "4788ee4a9f0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e-dirty"}.items()])
        client.set_terminated(run.info.run_id)
    runs = client.search_runs([experiment])
    page = build_report(runs, "headline", tmp_path / "page", uri)[0].read_text()
    assert "| matmul_13 | 397,645 (98% cuBLAS TF32) † |" in page
    assert "| matmul_9 | 51,000 (99% cuBLAS SGEMM) |" in page
    assert ("| matmul_13 | 4096x4096x4096 | — | 397,645 | cuBLAS TF32 | 404,500 | 98.3 |" in page)
    assert "| 1,890 MHz | clocks: sw_power_cap | `4788ee4-dirty` |" in page
    assert "| 1,890 MHz | clean | `4788ee4-dirty` |" in page
    assert "770" not in page
    assert "## Work per joule" in page  # matmul_13's, measured; matmul_9 had no energy span
    assert ("| matmul_13 | 4096x4096x4096 | cuda | 397,645 | 371,000 | 690 | 537.7 | 610 | "
            "80.1 | 6.71 | 560.2 | 0.96 |") in page
    assert "| matmul_9 | 4096x4096x4096 | cuda | 51,000 |" not in page
    assert "cuBLAS TF32 (CuPy, CUBLAS_COMPUTE_32F_FAST_TF32)" in page  # the provenance list
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or path)
    plots.plot_rates("headline", best_per_cell(runs), tmp_path / "rate.png")
    labels = [line.get_label() for line in figures[0].axes[0].get_lines()]
    assert "cuBLAS TF32" in labels and "cuBLAS SGEMM (CuPy, TF32 off)" in labels


def _trial(client, experiment: str, tiling: dict, gflops, start: int, size: int = 64,
           status: str = "ok", tags: dict = None, metrics: dict = None) -> str:
    """A matmul_3 run as a search records it, started at `start` (ms), without measuring."""
    run = client.create_run(experiment, start_time=start)
    params = {"backend.name": "opencl", "kernel.name": "matmul_3", "M": size, "N": size,
              "K": size, **{f"kernel.params.{k}": v for k, v in tiling.items()}}
    client.log_batch(
        run.info.run_id,
        metrics=[Metric(k, v, 0, 0) for k, v in {
            **({} if gflops is None else {"perf/gflops": gflops}), **(metrics or {})}.items()],
        params=[Param(k, str(v)) for k, v in params.items()],
        tags=[RunTag(k, v) for k, v in {"gemmlab.status": status, "gemmlab.operation": "sgemm",
                                         "device.name": "CPU", **(tags or {})}.items()])
    client.set_terminated(run.info.run_id, "FINISHED" if status != "failed" else "FAILED")
    return run.info.run_id


def test_the_page_shows_each_cells_fastest_run_and_its_tiling_not_the_newest(tmp_path):
    """Issue 58: after a search, the report showed its last trial (TS=16 WPT=16, 7.03) as
    matmul_3's rate while the sweep's best was TS=8 WPT=8 at 7.5, with no tiling to tell."""
    from runner.record.tracking import experiment_for

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = experiment_for(uri, "matmul_3_tuning")
    _trial(client, experiment, {"TS": 8, "WPT": 8}, 7.5, 1_000)
    _trial(client, experiment, {"TS": 4, "WPT": 1}, 2.1, 2_000, status="cached")
    _trial(client, experiment, {"TS": 16, "WPT": 16}, 7.03, 3_000)  # the newest measured
    _trial(client, experiment, {"TS": 64, "WPT": 32}, None, 4_000, status="failed",
           tags={"failure_reason": "WPT=32 does not divide"})
    _trial(client, experiment, {"TS": 16, "WPT": 16}, 3.0, 5_000, size=128)  # another size
    _trial(client, experiment, {"TS": 8, "WPT": 8}, 2.9, 6_000, size=128)
    out = tmp_path / "pages"
    report_main(["--experiment", "matmul_3_tuning", "--uri", uri, "--out", str(out)])
    page = _page(out, "matmul_3_tuning")
    assert "| matmul_3 | 64x64x64 | TS=8 WPT=8 | 7.5 |" in page
    assert "| matmul_3 | 128x128x128 | TS=16 WPT=16 | 3 |" in page
    assert "| matmul_3 | 7.5 (—) | 3 (—) |" in page  # the summary, 64 and 128 across
    assert "7.03" not in page and "| 2.1 |" not in page
    assert ("Each row and cell: the fastest measured run (ok or cached) of each step, size, "
            "backend and device, by its median rate, with the tiling that made it.") in page
    assert "WPT=32 does not divide" in page  # the failed trial is still listed as such
