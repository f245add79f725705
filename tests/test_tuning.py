"""`python -m runner.tuning`: an experiment without one of the two sweeps is one line naming the
experiment and the command that records the missing sweep (the page itself: test_sweep.py)."""

import pytest
from mlflow.tracking import MlflowClient

from runner.record import names
from runner.record.store import ensure_store
from runner.results.tuning import main as tuning_main


def _store(tmp_path, *sweepers: str) -> str:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ensure_store(uri)
    client = MlflowClient(uri)
    experiment = client.create_experiment("matmul_3_tuning")
    for sweeper in sweepers:
        parent = client.create_run(experiment, tags={
            names.SWEEP: "true", names.SWEEP_SWEEPER: sweeper,
            names.COMMAND: "python -m runner -m +search=matmul_3 size=256 "
                           "backend.device_type=cpu hydra.sweeper.n_trials=12"})
        client.set_terminated(parent.info.run_id)
    return uri


def _error(tmp_path, uri: str) -> str:
    with pytest.raises(SystemExit) as failed:
        tuning_main(["--experiment", "matmul_3_tuning", "--uri", uri,
                     "--out", str(tmp_path / "pages")])
    message = str(failed.value.code)
    assert message.startswith("gemmlab: error: ") and "\n" not in message, message
    assert not (tmp_path / "pages").exists()
    return message


def test_no_grid_names_the_experiment_and_the_grid_over_the_searchs_space(tmp_path):
    uri = _store(tmp_path, "OptunaSweeper")
    message = _error(tmp_path, uri)
    assert f"experiment 'matmul_3_tuning' in {uri} has no grid" in message
    assert ("`python -m runner -m kernel=matmul_3 kernel.params.TS=4,8,16,32,64 "
            "kernel.params.WPT=1,2,4,8,16,32 size=256 backend.device_type=cpu "
            f"tracking.experiment=matmul_3_tuning tracking.inspect=false tracking.uri={uri}`"
            ) in message
    assert "BasicSweeper" not in message and "experiment 1" not in message


def test_no_search_names_the_preset_that_records_one(tmp_path):
    uri = _store(tmp_path)
    message = _error(tmp_path, uri)
    assert "has no search" in message
    assert f"`python -m runner -m +search=matmul_3 tracking.uri={uri}`" in message


def _child(client, parent, tiling: dict, gflops: float, start: int, size: int = 64,
           status: str = "ok") -> None:
    run = client.create_run(parent.info.experiment_id, start_time=start,
                            tags={names.PARENT_RUN_ID: parent.info.run_id})
    params = {names.BACKEND_NAME: "opencl", names.KERNEL_NAME: "matmul_3", names.M: size,
              names.N: size, names.K: size,
              **{f"{names.KERNEL_PARAMS_PREFIX}{k}": v for k, v in tiling.items()}}
    for key, value in params.items():
        client.log_param(run.info.run_id, key, str(value))
    client.log_metric(run.info.run_id, names.GFLOPS, gflops)
    for key, value in {names.STATUS: status, names.OPERATION: "sgemm",
                       names.DEVICE_NAME: "CPU"}.items():
        client.set_tag(run.info.run_id, key, value)
    client.set_terminated(run.info.run_id)


def test_each_sweeps_best_is_its_fastest_run_at_the_searchs_size_with_its_tiling(tmp_path):
    """Issue 58: the grid's and the search's best are each the fastest measured run (never the
    newest) at the one step, size, backend and device they share (a faster point of the grid at
    another size is no target for a search at 64), each with its tiling, and the page says so."""
    uri = _store(tmp_path, "BasicSweeper", "OptunaSweeper")
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("matmul_3_tuning").experiment_id
    grid, search = sorted(client.search_runs([experiment]),
                          key=lambda r: r.data.tags[names.SWEEP_SWEEPER])
    _child(client, grid, {"TS": 8, "WPT": 8}, 7.5, 1_000)
    _child(client, grid, {"TS": 8, "WPT": 4}, 9.0, 1_500, size=32)
    _child(client, grid, {"TS": 16, "WPT": 16}, 7.03, 2_000)  # the grid's newest
    _child(client, search, {"TS": 4, "WPT": 1}, 2.0, 3_000)
    _child(client, search, {"TS": 8, "WPT": 8}, 7.5, 4_000, status="cached")
    _child(client, search, {"TS": 16, "WPT": 16}, 7.03, 5_000, status="cached")  # the last
    page, _ = tuning_main(["--experiment", "matmul_3_tuning", "--uri", uri,
                           "--out", str(tmp_path / "pages")])
    text = page.read_text()
    assert "| grid's best | TS=8 WPT=8 | 7.5 GFLOPS |" in text
    assert "| search's best | TS=8 WPT=8 | 7.5 GFLOPS |" in text
    assert "at trial **2** of 3" in text
    assert ("Best: the fastest measured run (ok or cached) of each step, size, backend and "
            "device, by its median rate; both sweeps' at the same step, size, backend and "
            "device.") in text
    assert "- kernel matmul_3 at 64x64x64, backend opencl" in text
