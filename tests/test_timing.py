"""Timing: warm-up samples are dropped, an L2 flush runs before every sample, untimed, and
so does the host's time between a step's launches."""

import threading
import time

import mlflow
import pyopencl as cl
import pytest
from conftest import compose_config

from runner.app import run
from runner.backends.opencl import OpenCLBackend
from runner.config.spec import ProblemSize, plan_kernel
from runner.errors import RunError
from runner.run.execute import prepare
from runner.run.operations import make_problem
from runner.run.timing import TimeStats, measure


def test_measure_drops_the_warm_up_and_flushes_before_every_sample():
    calls = []
    samples = iter(range(100))
    taken = measure(lambda: calls.append("time") or float(next(samples)), warmup=2, repeats=3,
                    label="test", before_each=lambda: calls.append("flush"))
    assert taken == [2.0, 3.0, 4.0]
    assert calls == ["flush", "time"] * 5


def test_stats_are_the_median_and_quartiles():
    stats = TimeStats.of([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (stats.median, stats.min, stats.max, stats.q1, stats.q3) == (3.0, 1.0, 5.0, 2.0, 4.0)


def test_flush_l2_flushes_before_every_kernel_and_baseline_sample(tmp_path, monkeypatch):
    """Every timed launch after the first checked one (warm-up, samples, the checked launch
    after them, the device copy's) has a flush of its own just before it."""
    events = []
    real_flush, real_time = OpenCLBackend.flush_cache, OpenCLBackend.time_ms
    monkeypatch.setattr(OpenCLBackend, "flush_cache",
                        lambda self: events.append("flush") or real_flush(self))
    monkeypatch.setattr(OpenCLBackend, "time_ms",
                        lambda self, enqueue: events.append("time") or real_time(self, enqueue))
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose_config("backend.device_type=cpu", "kernel=transpose_1", "m=40", "n=24",
                         "timing.warmup=2", "timing.repeats=4", "timing.flush_l2=true",
                         f"tracking.uri={store}", "isolate=false")  # counted in this process
    assert run(cfg) > 0
    assert events[0] == "time"  # the first checked launch: no sample, no flush
    pairs = events[1:]
    assert pairs == ["flush", "time"] * (len(pairs) // 2)
    assert len(pairs) // 2 >= 2 * (2 + 4) + 1, "kernel and device-copy samples, warm-up included"
    mlflow.set_tracking_uri(store)
    (recorded,) = mlflow.search_runs(experiment_names=["gemmlab"], output_format="list")
    assert recorded.data.params["timing.flush_l2"] == "True"


CPU_RUNTIMES = ["Portable Computing Language", "Intel(R) OpenCL"]


@pytest.fixture(scope="module", params=CPU_RUNTIMES, ids=["PoCL", "Intel"])
def each_cpu_runtime(request):
    """The CPU through each OpenCL runtime installed here that can build kernels."""
    from runner.backends.opencl import build_failure

    try:
        backend = OpenCLBackend(request.param, None, "cpu")
    except RunError:
        pytest.skip(f"{request.param} has no CPU device here")
    if build_failure(backend.device):
        pytest.skip(f"{request.param} cannot build kernels here: {build_failure(backend.device)}")
    return backend


def test_host_time_between_launches_is_not_timed(each_cpu_runtime):
    """A step's launches are held until all are queued: a host that takes 200 ms between them
    (NVIDIA's OpenCL takes tens of µs per launch) adds nothing to the device-event time.

    Checked on the events' own clock, with no margin for noise to cross: the timed span (from
    the first launch's start to the last one's end) begins after the last launch was queued,
    which was at least the 200 ms sleep after the first. Load on the host can only delay the
    start further. (A wall-clock bound, "under 100 ms", failed one run in five on an idle
    2-core machine: PoCL builds a kernel's work-group function at its first launch, 6-8 s
    when its kernel cache does not hold it yet (a new source, build option or PoCL), and that
    first launch was the timed one. The step is now launched once untimed first, as the
    runner's warm-up does.)

    What is checked is that nothing ran before the gate opened, not a runtime's status code for
    a held command: PoCL says QUEUED, Intel's CPU runtime 2026.2 SUBMITTED."""
    backend = each_cpu_runtime
    prepared = _prepared_on_cpu(backend, "matmul_9", ProblemSize(40, 24, 16))
    prepared.enqueue()  # untimed: the runtime's build of the launches happens here
    backend.synchronize()
    seen = {}

    def enqueue_with_a_slow_host():
        first = prepared.enqueue()  # matmul_9 is two launches: the A^T pre-pass, the kernel
        time.sleep(0.2)
        seen["first"] = first[0].command_execution_status
        seen["events"] = first + prepared.enqueue()
        return seen["events"]

    milliseconds = backend.time_ms(enqueue_with_a_slow_host)
    started = cl.command_execution_status.RUNNING, cl.command_execution_status.COMPLETE
    assert seen["first"] not in started, "the first launch waited for the gate"
    first, last = seen["events"][0], seen["events"][-1]
    # Device clock: the host's sleep lies between the first launch's queuing and the last's
    # (200 ms on the host's clock; 150 allows for the device clock's rate) ...
    assert last.profile.queued - first.profile.queued >= 150e6
    # ... and the timed span, which is the events' and nothing else, starts after it.
    assert first.profile.start >= last.profile.queued, "held until all are queued"
    assert milliseconds == pytest.approx((last.profile.end - first.profile.start) * 1e-6)


def test_a_failed_enqueue_leaves_the_queue_running(cpu_backend):
    prepared = _prepared_on_cpu(cpu_backend, "transpose_1", ProblemSize(40, 24, 1))

    def enqueue_then_fail():
        prepared.enqueue()
        raise RuntimeError("launch refused")

    with pytest.raises(RuntimeError, match="launch refused"):
        cpu_backend.time_ms(enqueue_then_fail)
    finished = threading.Thread(target=cpu_backend.synchronize, daemon=True)
    finished.start()
    finished.join(timeout=30)
    assert not finished.is_alive(), "the queue is still held behind the timing gate"


def _prepared_on_cpu(backend, kernel: str, size: ProblemSize):
    cfg = compose_config("backend.device_type=cpu", f"kernel={kernel}")
    plan = plan_kernel(cfg.kernel, size)
    return prepare(backend, cfg.kernel.sources, plan, make_problem(plan.operation, plan.size, 0))


def test_a_program_is_reused_by_its_own_backend_only(cpu_backend):
    """Programs are compiled once per backend object. Another backend (another runtime, or one
    made after the first is gone, perhaps at the same address) compiles its own, and a backend
    that is gone takes its programs with it."""
    import gc
    import weakref

    first = _prepared_on_cpu(cpu_backend, "transpose_1", ProblemSize(40, 24, 1))
    again = _prepared_on_cpu(cpu_backend, "transpose_1", ProblemSize(40, 24, 1))
    assert again.program is first.program
    other = OpenCLBackend(device_type="cpu")
    theirs = _prepared_on_cpu(other, "transpose_1", ProblemSize(40, 24, 1))
    assert theirs.program is not first.program
    their_program = weakref.ref(theirs.program)
    del other, theirs
    gc.collect()
    assert their_program() is None, "the cache still holds a program of a backend that is gone"


def test_the_runs_line_says_when_its_samples_are_noisy():
    from types import SimpleNamespace

    from runner.terminal.summary import gpu_note

    steady = TimeStats.of([1.0, 1.001, 0.999, 1.0, 1.002, 0.998, 1.0, 1.001, 0.999, 1.0])
    held_back = TimeStats.of([0.062, 0.063, 5.0, 0.31, 1.2, 0.062, 2.4, 0.9, 0.062, 3.3])
    assert gpu_note(SimpleNamespace(stats=steady, gpu=None, host=None)) == ""
    note = gpu_note(SimpleNamespace(stats=held_back, gpu=None, host=None))
    assert "samples noisy" in note and f"±{held_back.noise:.1%}" in note
    assert gpu_note(SimpleNamespace(stats=None, gpu=None, host=None)) == ""  # a sanitizer run
