"""Results pages are built from MLflow records: a table row per run, failures listed, a plot."""

from conftest import compose_config
from runner.app import run
from runner.report import main as report_main


def test_report_page_from_recorded_runs(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = ["backend.device_type=cpu", "timing.repeats=2", "timing.warmup=0",
              f"tracking.uri={store}", "tracking.experiment=ladder"]
    assert run(compose_config("kernel=matmul_1", "size=40", *common)) > 0
    assert run(compose_config("kernel=matmul_2", "size=40", *common)) > 0
    assert run(compose_config("kernel=matmul_2", "size=40", "kernel.params.TS=3", *common)) is None
    out = tmp_path / "pages"
    report_main(["--experiment", "ladder", "--uri", store, "--out", str(out)])
    page = (out / "ladder.md").read_text()
    assert "| matmul_1 | 40x40x40 |" in page
    assert "| matmul_2 | 40x40x40 |" in page
    assert "TS=3 is not an allowed value" in page, "failed runs are listed with their reason"
    assert "numpy" in page and "driver:" in page and "command(s):" in page
    assert (out / "ladder.png").stat().st_size > 10_000
