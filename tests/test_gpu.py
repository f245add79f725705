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


def _recorded(store):
    mlflow.set_tracking_uri(store)
    runs = mlflow.search_runs(experiment_names=["gemmlab"], output_format="list")
    assert len(runs) == 1
    return runs[0]


def _size(name: str, odd: bool) -> list[str]:
    if name.startswith("matmul_"):
        return ["m=1001", "n=1537", "k=333"] if odd else ["size=4096"]
    return ["m=1001", "n=1537"] if odd else ["size=8192"]


@pytest.mark.parametrize("odd", [False, True], ids=["large", "odd"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_kernel_verified_on_the_gpu(tmp_path, name, backend, odd):
    if name == "matmul_1" and not odd:
        pytest.skip("the naive kernel at 4096 is the benchmark's job, not a test's")
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
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
