"""How gemmlab's launcher (hydra_plugins/gemmlab_launcher) composes a batch: every job's config
once; in a CUDA batch the jobs after the first in a thread while the jobs run, each handed to
the compile pool as it comes (runner/sweep/precompile.py, Precompiler.submit); an OpenCL batch
whole before it starts. A config that cannot be composed ends the sweep before a job starts."""

import threading
import time

import pytest
from test_bad_inputs_cli import gemmlab, one_error_line, runs
from omegaconf import OmegaConf

from hydra_plugins.gemmlab_launcher.gemmlab_launcher import _ComposedOnce
from runner.sweep import precompile

MASTER = OmegaConf.create({"hydra": {}})


class FakeLoad:
    """Hydra's load_sweep_config: a config per overrides, which thread composed it, and an
    error for the overrides listed in `bad`."""

    def __init__(self, backend: str, bad=()):
        self.backend, self.bad = backend, set(bad)
        self.threads: dict = {}
        self.calls: list = []

    def __call__(self, master_config, sweep_overrides):
        job = " ".join(sweep_overrides)
        self.calls.append(job)
        self.threads[job] = threading.current_thread()
        time.sleep(0.01)  # as a composition takes a while: the batch's calls overtake it
        if job in self.bad:
            raise ValueError(f"cannot compose {job}")
        return OmegaConf.create({"backend": {"name": self.backend}, "job": job})


@pytest.fixture
def no_worker(monkeypatch):
    """The batch's first job is not sent to a worker (prepare_first), nor compiled."""
    from runner.job import supervisor

    monkeypatch.setattr(supervisor, "prepare_first", lambda cfg, request=None: None)
    monkeypatch.setattr(precompile, "request_of", lambda cfg, overrides: None)


BATCH = [["size=1"], ["size=2"], ["size=3"], ["size=4"]]


def validate_then_launch(composed: _ComposedOnce, batch=BATCH) -> list:
    """Hydra's sweeper validates the batch (and discards what it gets), then the launcher asks
    for each job's config."""
    for overrides in batch:
        composed(MASTER, overrides)
    composed.launching()
    return [composed(MASTER, overrides) for overrides in batch]


def test_a_cuda_batch_composes_its_later_jobs_in_a_thread_each_once(no_worker):
    load = FakeLoad("cuda")
    composed = _ComposedOnce(load)
    assert composed(MASTER, BATCH[0]).job == "size=1"
    assert composed.composing()
    assert composed(MASTER, BATCH[1]) is None  # the validation: not waited for
    for overrides in BATCH[2:]:
        composed(MASTER, overrides)
    composed.launching()
    configs = [composed(MASTER, overrides) for overrides in BATCH]
    assert [config.job for config in configs] == ["size=1", "size=2", "size=3", "size=4"]
    assert sorted(load.calls) == ["size=1", "size=2", "size=3", "size=4"]  # once each
    here = threading.current_thread()
    assert load.threads["size=1"] is here
    assert all(load.threads[job] is not here for job in ("size=2", "size=3", "size=4"))
    composed.forget()


def test_the_thread_composes_only_while_this_process_waits_for_a_job(no_worker):
    """Beside a job's own work in this process (its MLflow record opening) composing would slow
    it: the thread waits until the job's worker has it (supervisor.relaying)."""
    from runner.job.supervisor import relaying

    load = FakeLoad("cuda")
    composed = _ComposedOnce(load)
    for overrides in BATCH:
        composed(MASTER, overrides)
    composed.launching()
    time.sleep(0.3)
    assert load.calls == ["size=1"]
    relaying.set()
    try:
        deadline = time.monotonic() + 10
        while len(load.calls) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        relaying.clear()
    assert load.calls == ["size=1", "size=2", "size=3", "size=4"]
    composed.forget()


def test_an_opencl_batch_is_composed_whole_before_it_starts(no_worker):
    load = FakeLoad("opencl")
    composed = _ComposedOnce(load)
    for overrides in BATCH:
        assert composed(MASTER, overrides).job == " ".join(overrides)
    assert not composed.composing()
    composed.launching()
    configs = [composed(MASTER, overrides) for overrides in BATCH]
    assert [config.job for config in configs] == ["size=1", "size=2", "size=3", "size=4"]
    assert len(load.calls) == 4
    assert set(load.threads.values()) == {threading.current_thread()}


def test_a_composition_that_fails_in_the_thread_is_raised_to_the_launcher(no_worker):
    from runner.job.supervisor import relaying

    composed = _ComposedOnce(FakeLoad("cuda", bad={"size=3"}))
    for overrides in BATCH:
        composed(MASTER, overrides)
    composed.launching()
    relaying.set()
    try:
        deadline = time.monotonic() + 10
        while composed.failure(MASTER, BATCH[1:]) is None and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        relaying.clear()
    failed = composed.failure(MASTER, BATCH[1:])
    assert isinstance(failed, ValueError) and "size=3" in str(failed)
    assert composed.failure(MASTER, BATCH[3:]) is None  # only the jobs asked about
    assert composed(MASTER, BATCH[1]).job == "size=2"
    with pytest.raises(ValueError, match="cannot compose size=3"):
        composed(MASTER, BATCH[2])
    composed.forget()


def test_configs_composed_in_the_thread_go_to_the_compile_pool(no_worker):
    heard = []
    composed = _ComposedOnce(FakeLoad("cuda"))
    for overrides in BATCH:
        composed(MASTER, overrides)
    composed.launching(lambda config, overrides: heard.append(" ".join(overrides)))
    [composed(MASTER, overrides) for overrides in BATCH]
    assert heard == ["size=2", "size=3", "size=4"]  # the first job's worker compiles its own
    composed.forget()


class FakePool:
    def __init__(self, max_workers, mp_context, initializer=None):
        self.max_workers = max_workers
        self.initializer = initializer  # each process's first call (Ctrl-C ignored)
        self.submitted: list = []
        self.capabilities: list = []
        self.shut = False
        self._processes: dict = {}

    def submit(self, fn, request, capability):
        self.submitted.append(request)
        self.capabilities.append(capability)

    def shutdown(self, wait, cancel_futures):
        self.shut = True


def request(name: str) -> precompile.CompileRequest:
    return precompile.CompileRequest(name, name + ".cu", (), None, (), ("k",), 0)


def test_the_compile_pool_takes_requests_as_they_come_each_once(monkeypatch, tmp_path):
    from runner.backends import nvrtc

    monkeypatch.setenv(nvrtc.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(precompile, "ProcessPoolExecutor", FakePool)
    monkeypatch.setattr(precompile, "_nvml_gpus", lambda: (1, 90))
    pool = precompile.Precompiler([request("first"), None, request("a")])
    pool.submit(request("b"))
    pool.submit(request("a"))  # asked for already
    pool.submit(request("first"))  # its worker compiles it
    pool.submit(None)  # a job its own run refuses, or another backend's
    fake = pool._pool
    assert [r.source for r in fake.submitted] == ["a", "b"]
    assert fake.capabilities == [90, 90]  # NVML's: the pool's processes never start CUDA
    pool.close()
    assert fake.shut
    pool.submit(request("c"))  # after the batch: nothing
    assert [r.source for r in fake.submitted] == ["a", "b"]


def test_no_pool_without_a_gpu(monkeypatch, tmp_path):
    from runner.backends import nvrtc

    monkeypatch.setenv(nvrtc.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(precompile, "ProcessPoolExecutor", FakePool)
    monkeypatch.setattr(precompile, "_nvml_gpus", lambda: (0, None))
    pool = precompile.Precompiler([None, request("a")])
    pool.submit(request("b"))
    assert pool._pool is None


@pytest.mark.parametrize("backend", ["backend=cuda", "backend.device_type=cpu"])
def test_a_later_job_that_cannot_be_composed_ends_the_sweep_before_any_job(tmp_path, backend):
    """On the command line: Hydra's own error, in one line, and no job recorded (in a CUDA
    batch the first job waits for the next one's config before it starts)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = gemmlab(tmp_path, "-m", backend, "kernel=matmul_4", "size=256,abc",
                   f"tracking.uri={uri}", quick=False)
    one_error_line(done, "size=abc", "could not be converted to Integer")
    assert not [run for run in runs(uri) if "mlflow.parentRunId" in run.data.tags]
