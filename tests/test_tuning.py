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
