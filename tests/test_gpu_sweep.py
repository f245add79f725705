"""Sweeps on NVIDIA GPUs (marked `gpu`, skipped without them): the GPU pool gives each parallel
job its own GPU, recorded per run."""

import os
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from runner.backends.cuda import gpu_count

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(gpu_count() < 2, reason="needs two NVIDIA GPUs")]


def test_the_gpu_pool_runs_each_job_on_a_gpu_of_its_own(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "runner", "-m", "hydra/launcher=gpus", "gpus=2", "backend=cuda",
         "kernel=matmul_9", "size=4096", "seed=0,1,2,3,4,5", "timing.repeats=50",
         f"tracking.uri={store}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("gemmlab").experiment_id
    jobs = client.search_runs([experiment], "tags.`gemmlab.status` = 'ok'")
    assert len(jobs) == 6
    by_gpu = {}
    for job in jobs:
        by_gpu.setdefault(job.data.tags["device.index"], []).append(job)
    assert set(by_gpu) == {"0", "1"}, "both GPUs are used"
    for runs in by_gpu.values():  # never two jobs on one GPU at once
        spans = sorted((run.info.start_time, run.info.end_time) for run in runs)
        assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))
