"""Where kernels and configs come from: the packaged ones, and a user's own outside the package."""

import os
import subprocess
import sys

import mlflow
import pytest

from runner.config.paths import (
    CONF_DIR,
    KERNEL_PATH_VARIABLE,
    KERNELS_DIR,
    kernel_source_path,
)
from runner.errors import RunError


def _user_kernel_folder(root, backend="opencl", file_name="matmul_2.cl", text="// mine\n"):
    (root / backend).mkdir(parents=True)
    (root / backend / file_name).write_text(text)
    return root


def test_packaged_kernels_are_found_without_any_user_folder(monkeypatch):
    monkeypatch.delenv(KERNEL_PATH_VARIABLE, raising=False)
    assert kernel_source_path("cuda", "matmul_9.cu") == KERNELS_DIR / "cuda" / "matmul_9.cu"


def test_configured_folders_come_before_the_environment_and_the_package(tmp_path, monkeypatch):
    configured = _user_kernel_folder(tmp_path / "configured")
    from_environment = _user_kernel_folder(tmp_path / "environment")
    monkeypatch.setenv(KERNEL_PATH_VARIABLE,
                       os.pathsep.join([str(tmp_path / "missing"), str(from_environment)]))
    assert kernel_source_path("opencl", "matmul_2.cl", [str(configured)]) == \
        configured / "opencl" / "matmul_2.cl"
    assert kernel_source_path("opencl", "matmul_2.cl") == from_environment / "opencl" / "matmul_2.cl"
    # A user folder without the file falls through to the packaged kernel.
    assert kernel_source_path("opencl", "matmul_3.cl", [str(configured)]) == \
        KERNELS_DIR / "opencl" / "matmul_3.cl"


def test_a_missing_source_names_every_folder_searched(tmp_path, monkeypatch):
    monkeypatch.setenv(KERNEL_PATH_VARIABLE, str(tmp_path / "from_environment"))
    with pytest.raises(RunError) as raised:
        kernel_source_path("opencl", "nothing_here.cl", [str(tmp_path / "configured")])
    message = str(raised.value)
    assert "\n" not in message and "opencl/nothing_here.cl" in message
    for folder in ("configured", "from_environment"):
        assert str(tmp_path / folder) in message
    assert str(KERNELS_DIR) in message


@pytest.mark.parametrize("file_name", ["../matmul_2.cl", "/etc/passwd", "opencl/matmul_2.cl",
                                       "..\\matmul_2.cl", "..", ""])
def test_a_source_name_cannot_leave_its_folder(file_name):
    with pytest.raises(RunError, match="must be a plain file name"):
        kernel_source_path("opencl", file_name)


def test_a_kernel_and_config_outside_the_package_run_from_the_command_line(tmp_path):
    """A user's own step: its YAML on Hydra's search path, its source in a kernel_dirs folder."""
    (tmp_path / "my_conf" / "kernel").mkdir(parents=True)
    (tmp_path / "my_conf" / "kernel" / "my_copy.yaml").write_text(
        (CONF_DIR / "kernel" / "copy_1.yaml").read_text().replace("copy_1", "my_copy"))
    (tmp_path / "my_kernels" / "opencl").mkdir(parents=True)
    (tmp_path / "my_kernels" / "opencl" / "my_copy.cl").write_text(
        (KERNELS_DIR / "opencl" / "copy_1.cl").read_text().replace("copy_1", "my_copy"))
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {key: value for key, value in os.environ.items() if key != KERNEL_PATH_VARIABLE}
    done = subprocess.run(
        [sys.executable, "-m", "runner", f"hydra.searchpath=['file://{tmp_path / 'my_conf'}']",
         "kernel=my_copy", f"kernel_dirs=['{tmp_path / 'my_kernels'}']",
         "backend.device_type=cpu", "m=40", "n=24", "timing.repeats=3", "timing.warmup=0",
         f"tracking.uri={store}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    mlflow.set_tracking_uri(store)
    (recorded,) = mlflow.search_runs(experiment_names=["gemmlab"], output_format="list")
    assert recorded.info.status == "FINISHED"
    assert recorded.data.params["kernel.name"] == "my_copy"
    source = mlflow.artifacts.load_text(f"runs:/{recorded.info.run_id}/source/my_copy.cl")
    assert "__kernel void my_copy(" in source
