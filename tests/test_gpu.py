"""On an NVIDIA GPU (marked `gpu`, skipped without one): every kernel in both backends,
verified at 4096 (8192 for copies) and at an odd size, recorded in MLflow with registers."""

import mlflow
import pytest

from conftest import KERNEL_NAMES, compose_config, requires_cuda_gpu, requires_nvidia_opencl
from runner.app import run

pytestmark = pytest.mark.gpu

BACKENDS = [
    pytest.param(["backend=cuda"], id="cuda", marks=requires_cuda_gpu),
    pytest.param(["backend=opencl", "backend.platform=NVIDIA"], id="opencl-nvidia",
                 marks=requires_nvidia_opencl),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One store for the module: a fresh sqlite store costs seconds of schema migrations."""
    return f"sqlite:///{tmp_path_factory.mktemp('gpu') / 'mlflow.db'}"


def _recorded(store):
    mlflow.set_tracking_uri(store)
    return mlflow.get_run(mlflow.last_active_run().info.run_id)


def _size(name: str, odd: bool) -> list[str]:
    if name.startswith("matmul_"):
        return ["m=1001", "n=1537", "k=333"] if odd else ["size=4096"]
    return ["m=1001", "n=1537"] if odd else ["size=8192"]


@pytest.mark.parametrize("odd", [False, True], ids=["large", "odd"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_kernel_verified_on_the_gpu(store, name, backend, odd):
    cfg = compose_config(f"kernel={name}", *backend, *_size(name, odd), "timing.repeats=3",
                         "timing.warmup=1", f"tracking.uri={store}")
    assert run(cfg) is not None
    recorded = _recorded(store)
    assert recorded.info.status == "FINISHED"
    metrics = recorded.data.metrics
    assert metrics["check/passed"] == 1.0
    assert metrics["kernel/registers"] > 0, "registers come from the driver (CUDA) or ptxas (OpenCL)"
    assert metrics["perf/pct_of_vendor"] > 0
    assert recorded.data.tags["device.type"] == "gpu"
