"""The `gemmlab` console script: its own --version, everything else handed to the Hydra app."""

import subprocess
import sys
from pathlib import Path

import pytest

from runner import __version__

# pip puts console scripts beside the interpreter of the environment it installs into.
GEMMLAB = Path(sys.executable).parent / "gemmlab"


def _gemmlab(*args, cwd):
    assert GEMMLAB.is_file(), f"no {GEMMLAB}: install the project (pip install -e .)"
    return subprocess.run([str(GEMMLAB), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_version_names_gemmlab_and_composes_nothing(tmp_path):
    done = _gemmlab("--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"gemmlab {__version__}\n"
    assert not any(tmp_path.iterdir()), "no Hydra output folder, no MLflow store"


def test_overrides_reach_the_hydra_app_unchanged(tmp_path):
    done = _gemmlab("kernel=matmul_3", "size=48", "timing.repeats=3", "--cfg", "job",
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "name: matmul_3" in done.stdout
    assert "size: 48" in done.stdout and "repeats: 3" in done.stdout


def test_ui_serves_the_store_prints_the_latest_sweep_and_stops_on_ctrl_c(tmp_path):
    import signal
    import socket
    import urllib.request

    from mlflow.tracking import MlflowClient

    from runner.record.tracking import experiment_for

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    experiment = experiment_for(store, "gemmlab")
    client = MlflowClient(store)
    client.create_run(experiment, run_name="older sweep", tags={"gemmlab.sweep": "true"})
    newest = client.create_run(experiment, run_name="sweep gemmlab: size=64,128",
                               tags={"gemmlab.sweep": "true"})
    client.create_run(experiment, run_name="a job, not a sweep")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ui = subprocess.Popen([str(GEMMLAB), "ui", "--uri", store, "--port", str(port)], cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while not any("Ctrl-C" in line for line in lines):
            line = ui.stdout.readline()
            assert line, f"gemmlab ui ended early: {ui.stderr.read()[-2000:]}"
            lines.append(line)
        url = (f"http://127.0.0.1:{port}/#/experiments/{experiment}/runs/"
               f"{newest.info.run_id}")
        assert any(url in line for line in lines), lines
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as page:
            assert page.status == 200
        ui.send_signal(signal.SIGINT)
        assert ui.wait(timeout=30) == 0
        with pytest.raises(OSError):  # what it started is gone: nothing listens any more
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        if ui.poll() is None:
            ui.kill()


def test_ui_without_a_store_is_one_line(tmp_path):
    done = _gemmlab("ui", "--uri", f"sqlite:///{tmp_path / 'none.db'}", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().startswith("gemmlab: error: no MLflow store at")
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "none.db").exists()


def test_help_describes_gemmlab_and_offers_only_real_backends(tmp_path):
    done = _gemmlab("--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("gemmlab: "), done.stdout[:200]
    assert "powered by Hydra" not in done.stdout
    backends = next(line for line in done.stdout.splitlines() if line.startswith("backend:"))
    assert backends == "backend: cuda, opencl"
    commands = done.stdout.split("Commands")[1].split("Examples:")[0]
    for command in ("gemmlab ui", "gemmlab compare A B", "python -m runner.report",
                    "python -m runner.inspect", "python -m runner.seed_tables",
                    "python -m runner.tuning"):
        assert f"  {command} " in commands, commands


@pytest.mark.parametrize("command", [["compare", "--help"], ["ui", "--help"]])
def test_the_commands_the_help_lists_are_there(tmp_path, command):
    done = _gemmlab(*command, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: gemmlab {command[0]} ")


def test_the_terminal_holds_gemmlabs_lines_and_the_job_log_the_device_choice(tmp_path):
    """A run prints its result line and where it was recorded; the OpenCL device chosen, and
    why, goes to Hydra's job log (outputs/…/app.log), not the terminal."""
    done = _gemmlab("backend.device_type=cpu", "size=16", "timing.repeats=3", "timing.warmup=0",
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout
    assert lines[0].startswith("matmul_2 · opencl · ") and " · 16x16x16 · " in lines[0]
    assert lines[1].startswith("  recorded: MLflow run ")
    assert "[INFO]" not in done.stdout + done.stderr, done.stdout + done.stderr
    (log,) = (tmp_path / "outputs").glob("*/*/app.log")
    assert "OpenCL device: " in log.read_text()


def test_a_schema_node_is_not_a_backend(tmp_path):
    done = _gemmlab("backend=cuda_schema", "--cfg", "job", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("gemmlab: error: ") and "cuda_schema" in done.stderr
    assert "Available options in 'backend': cuda, opencl" in done.stderr


@pytest.mark.parametrize("backend, key", [("cuda", "backend.devic=1"),
                                          ("opencl", "backend.device_type=fpga")])
def test_the_backends_are_still_checked_against_their_schema(tmp_path, backend, key):
    done = _gemmlab(f"backend={backend}", key, "--cfg", "job", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("gemmlab: error: "), done.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    assert GEMMLAB.is_file()
    help_ = subprocess.Popen([str(GEMMLAB), "--help"], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    help_.stdout.close()  # `| head` that has already read its lines
    stderr = help_.stderr.read().decode()
    assert help_.wait(timeout=120) == 141
    assert stderr == ""
