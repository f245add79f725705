"""The CUDA examples of docs/examples/bring_your_own on an NVIDIA GPU (marked `gpu`, skipped
without one): each verified and timed through the command line (the kernel file with host
headers and `uint` included, at beta = 0 with C poisoned), the template kernel swept over its
parameters in one multirun, the constraints refusing what cannot be instantiated before
anything is compiled; and the tutorial's kernels.cl with its settings header on NVIDIA's
OpenCL, the YAML's KERNEL winning over the header's."""

import pytest
from conftest import requires_cuda_gpu, requires_nvidia_opencl
from mlflow.tracking import MlflowClient
from test_bad_inputs_cli import gemmlab
from test_bring_your_own import USER_FOLDERS

pytestmark = [pytest.mark.gpu, requires_cuda_gpu]

GPU_QUICK = ["backend=cuda", "timing.repeats=5", "timing.warmup=1"]


def _jobs(uri: str) -> list:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("gemmlab").experiment_id
    return [run for run in client.search_runs([experiment])
            if run.data.tags.get("gemmlab.sweep") != "true"
            and run.data.tags.get("gemmlab.series") != "true"]


@pytest.mark.parametrize("name, overrides", [
    ("prefetch_sgemm", []),
    ("prefetch_sgemm", ["kernel.params.DOUBLE_BUFFER=0"]),
    ("tiled_namespace", []),
    ("coalesced_axpby", []),
    ("host_headers_sgemm", []),
    ("host_headers_sgemm", ["kernel.params.BLOCKSIZE=16"]),
], ids=["template", "template-single-buffer", "namespace", "alpha-beta", "host-headers-beta-0",
        "host-headers-16"])
@pytest.mark.parametrize("size", [["size=1024"], ["m=1000", "n=1030", "k=999"]],
                         ids=["1024", "1000x1030x999"])
def test_each_cuda_example_is_verified_and_timed(tmp_path, name, overrides, size):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = gemmlab(tmp_path, *GPU_QUICK, f"kernel={name}", *USER_FOLDERS, *overrides, *size,
                   f"tracking.uri={uri}", quick=False, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = _jobs(uri)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["check/passed"] == 1.0
    assert run.data.metrics["time_ms/median"] > 0 and run.data.metrics["perf/gflops"] > 0
    assert run.data.metrics["kernel/registers"] > 0
    if name == "coalesced_axpby":  # beta != 0: checked against alpha*A·B + beta*C0
        assert "beta*C0 (alpha=2, beta=0.5)" in run.data.tags["check.method"]
    if name == "host_headers_sgemm":  # beta = 0: C poisoned with a finite value, 0*C = 0
        assert "beta*C0" not in run.data.tags["check.method"]


@requires_nvidia_opencl
@pytest.mark.parametrize("params", [[], ["kernel.params.TSM=128", "kernel.params.WPTM=8"]],
                         ids=["defaults", "128"])
def test_the_settings_header_example_on_nvidias_opencl(tmp_path, params):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = gemmlab(tmp_path, "backend=opencl", "backend.platform=NVIDIA", "timing.repeats=5",
                   "timing.warmup=1", "kernel=tutorial_settings_7", *USER_FOLDERS, *params,
                   "m=1000", "n=1030", "k=999", f"tracking.uri={uri}", quick=False, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = _jobs(uri)
    assert run.data.metrics["check/passed"] == 1.0


def test_a_template_sweep_instantiates_each_shape_and_refuses_what_cannot_be(tmp_path):
    """Eight shapes in one multirun: BLOCK_SIZE_M=128 with BLOCK_SIZE_K=32, double-buffered,
    would need 64 KiB of static shared memory, so the spec's constraint refuses those two
    before a compile; the other six are instantiated, verified and timed."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = gemmlab(tmp_path, *GPU_QUICK, "kernel=prefetch_sgemm", *USER_FOLDERS,
                   "kernel.params.BLOCK_SIZE_M=64,128", "kernel.params.THREAD_SIZE_Y=4,8",
                   "kernel.params.BLOCK_SIZE_K=8,32", "m=1000", "n=1030", "k=999",
                   f"tracking.uri={uri}", quick=False, timeout=900,
                   prefix=("-m", "runner", "-m"))
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = _jobs(uri)
    assert len(jobs) == 8
    status = {(run.data.params["kernel.params.BLOCK_SIZE_M"],
               run.data.params["kernel.params.THREAD_SIZE_Y"],
               run.data.params["kernel.params.BLOCK_SIZE_K"]): run.data.tags["gemmlab.status"]
              for run in jobs}
    refused = {key for key, value in status.items() if value == "refused"}
    assert refused == {("128", "4", "32"), ("128", "8", "32")}, status
    assert all(value == "ok" for key, value in status.items() if key not in refused), status
    for run in jobs:
        if run.data.tags["gemmlab.status"] == "refused":
            assert "48 KiB of static shared memory" in run.data.tags["failure_reason"]
            assert "kernel/registers" not in run.data.metrics  # never compiled
        else:
            assert run.data.metrics["check/passed"] == 1.0
            assert run.data.tags["timing.launches"].startswith("Sgemm<")
