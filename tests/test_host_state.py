"""The host's CPU counters around a measurement (runner/run/host_state.py): another process
spinning a core makes it `shared`; this process's own threads, however busy, are never others.

The machine these run on is shared (other tests, other people's work), so no test asserts
`clean` from a live reading: each asserts what a neighbour cannot undo. A spinning child adds
about a core of others' use whatever else runs; own threads burning cores cannot push others'
share past what the CPUs had left. The thresholds are tested on constructed states."""

import hashlib
import subprocess
import sys
import threading
import time

import pytest

from runner.record import names
from runner.run import host_state
from runner.run.host_state import HostMonitor, HostState, shared_threshold

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the CPU counters are read on Linux only")
SPAN_S = 0.5  # long enough that the counters' 10 ms ticks are a few percent of a core


@pytest.fixture
def spinning_child():
    """A child process that keeps one core busy until the test ends (not waited for inside
    the span, so its CPU time is not counted as this process's own)."""
    child = subprocess.Popen([sys.executable, "-c", "import sys\nsys.stdout.write('go\\n')\n"
                              "sys.stdout.flush()\nwhile True: pass"],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "go\n"
    time.sleep(0.05)
    yield child
    child.kill()
    child.wait()


@linux_only
def test_a_process_spinning_beside_the_measurement_makes_it_shared(spinning_child):
    with HostMonitor() as state:
        time.sleep(SPAN_S)
    assert state.hygiene == "shared", state
    # The child alone is a core's worth when it has a core; on a 2-core host crowded by other
    # work it still gets a share, and everyone else's use counts as others' too.
    assert state.other_cpu_cores >= 0.5, state
    assert state.cpu_cores >= 1 and state.span_s >= SPAN_S
    assert "other processes used" in state.why()
    assert state.tags() == {names.HOST_HYGIENE: "shared",
                            names.HOST_HYGIENE_REASONS: state.why()}
    assert state.metrics() == {names.HOST_OTHER_CPU_CORES: state.other_cpu_cores,
                               names.HOST_CPU_CORES: state.cpu_cores}


def _burn_in_threads(seconds: float, threads: int) -> None:
    """Keep `threads` threads of this process busy for `seconds` (hashlib releases the GIL
    while it hashes a large block, and starts no threads of its own, unlike numpy's BLAS)."""
    block = bytes(1 << 20)
    stop = time.perf_counter() + seconds

    def loop():
        while time.perf_counter() < stop:
            hashlib.sha256(block).digest()

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def _ticks_margin(cores: int) -> float:
    """How far the counters' 10 ms ticks can move a reading over SPAN_S, in cores."""
    return 0.15 + 0.02 * cores


@linux_only
def test_own_threads_are_not_others():
    cores = len(host_state.allowed_cpus())
    with HostMonitor() as state:
        before, started = time.process_time(), time.perf_counter()
        _burn_in_threads(SPAN_S, threads=cores + 1)  # more than the cores: none left idle
        own = (time.process_time() - before) / (time.perf_counter() - started)
    assert own >= 0.3, "the threads ran (a share of the cores, on a crowded host)"
    assert state.own_cpu_cores == pytest.approx(own, abs=_ticks_margin(cores)), state
    # Counted as others, the threads would push others' share past what the CPUs had left
    # once this process took its own (cores - own): by `own`, far beyond the ticks' margin.
    assert state.other_cpu_cores <= cores - state.own_cpu_cores + _ticks_margin(cores), state


@linux_only
def test_a_waited_child_is_own_work():
    """The children this process waited for count as its own (a compiler it ran, say)."""
    with HostMonitor() as state:
        subprocess.run([sys.executable, "-c", "import time\nend = time.time() + 0.4\n"
                        "while time.time() < end: pass"], check=True)
    assert state.own_cpu_cores >= 0.3 * 0.4 / state.span_s, state
    assert state.other_cpu_cores <= (state.cpu_cores - state.own_cpu_cores
                                     + _ticks_margin(state.cpu_cores)), state


@linux_only
def test_a_short_span_is_watched_on_or_unknown():
    with HostMonitor() as state:
        pass
    assert state.span_s >= host_state.MIN_SPAN_S and state.measured_s < host_state.MIN_SPAN_S
    assert state.hygiene in ("clean", "shared")
    with HostMonitor(extend=False) as state:
        pass
    assert state.hygiene is None and state.other_cpu_cores is None
    assert "shorter than" in state.why() and state.tags() == {}
    assert state.metrics() == {names.HOST_OTHER_CPU_CORES: None, names.HOST_CPU_CORES: None}


def test_without_counters_nothing_is_recorded(monkeypatch):
    monkeypatch.setattr(host_state, "_psutil", lambda: None)
    with HostMonitor() as state:
        pass
    assert state.hygiene is None and state.tags() == {}
    assert set(state.metrics().values()) == {None}
    assert "Linux" in state.why()


@pytest.mark.parametrize("cores, others, hygiene", [
    (2, 0.0, "clean"), (2, 0.24, "clean"), (2, 0.25, "shared"), (2, 1.0, "shared"),
    (16, 1.5, "clean"), (16, 1.6, "shared"),  # a tenth of 16 cores is more than a quarter core
])
def test_the_threshold(cores, others, hygiene):
    state = HostState(other_cpu_cores=others, cpu_cores=cores, span_s=1.0)
    assert state.hygiene == hygiene
    assert (state.why() == "") == (hygiene == "clean")
    assert shared_threshold(cores) == max(0.25, 0.1 * cores)
