"""The host's CPUs while a run measures on them: how much CPU time other processes took, the
CPU counterpart of runner/run/gpu_state.py. Linux only, through psutil; elsewhere every value is
absent (None), never 0.

    with HostMonitor() as state:
        ...timed launches...
    state.hygiene, state.why(), state.metrics(), state.tags()

Others' CPU use over the span is the busy time of the CPUs this process may run on (user, nice,
system, irq, softirq, steal; /proc/stat) less this process's own CPU time (every thread, the
OpenCL CPU runtime's workers included, and the children it waited for), in cores' worth:
1.0 is one core kept busy by someone else for the whole span. Steal counts as others': it is
time a hypervisor gave our CPUs to another guest, as disturbing to a timing as a neighbour
process. Idle and iowait are idle; guest and guest_nice are already inside user and nice.

`hygiene`: `clean` when others used less than `shared_threshold(cores)` (a quarter of a core or
a tenth of the cores, whichever is more), `shared` otherwise, None where it cannot tell (not
Linux, no psutil, or a span too short for the counters).

Why a minimum span: /proc/stat and a process's CPU times move in 10 ms ticks (USER_HZ), so
each reading is off by up to a tick per counter, whatever the span. Measured on the 2-vCPU Xeon
this was written on, its CPUs kept full (others + own must then read 2.00 cores), 20 spans of
each length: off by up to 1.1 cores at 10 ms, 0.3 at 50 ms, 0.16 at 100 ms, 0.07 at 200 ms,
0.03 at 500 ms (cores + 1 threads hashing inside `HostMonitor(min_span_s=0, extend=False)`,
other_cpu_cores + own_cpu_cores printed); the same host idle read 0.00-0.05 over 200 ms. From
200 ms the error stays well inside the quarter core that separates clean from shared. A span
shorter than `min_span_s` (0.2 s) is watched on after it ends, this process idle meanwhile,
until 0.2 s have passed (`extend=True`, the default: the window then holds the measurement and
the moment after it); with `extend=False` such a span gives None. The load average is no
fallback: it counts this process's own threads and trails by a minute.

A sweep's parent process waits while its worker measures (it read 0.00-0.05 core over the
timed launches), so the worker's others are the host's others, not its own sweep.
"""

import os
import sys
import time
from dataclasses import dataclass
from typing import Optional

from runner.record import names

# Shorter spans are below what 10 ms counters can resolve against the threshold (module doc).
MIN_SPAN_S = 0.2
# `clean` below max(SHARED_CORES, SHARED_FRACTION × cores) of others' CPU use: one other
# process spinning reads about 1.0, the counters' error over 0.2 s is under 0.07, and a host's
# daemons take a few hundredths. A quarter core is clear of all three; on a large host, whose
# counters sum more ticks and whose daemons are more, a tenth of its cores.
SHARED_CORES = 0.25
SHARED_FRACTION = 0.10
_IDLE_FIELDS = ("idle", "iowait", "guest", "guest_nice")  # not busy, or counted in user/nice


def shared_threshold(cores: int) -> float:
    """Others' CPU use (cores' worth) from which a measurement on `cores` CPUs is `shared`."""
    return max(SHARED_CORES, SHARED_FRACTION * cores)


@dataclass
class HostState:
    """What the host's CPU counters said over one measurement."""
    other_cpu_cores: Optional[float] = None  # others' CPU time over the span, in cores
    own_cpu_cores: Optional[float] = None  # this process's (threads and waited children)
    cpu_cores: Optional[int] = None  # the CPUs this process may run on
    span_s: float = 0.0  # the window the counters covered, host clock
    measured_s: float = 0.0  # the measurement itself (span_s is longer where it was extended)
    unknown: str = ""  # why nothing could be told, where nothing could

    @property
    def hygiene(self) -> Optional[str]:
        if self.other_cpu_cores is None or self.cpu_cores is None:
            return None
        return "shared" if self.other_cpu_cores >= shared_threshold(self.cpu_cores) else "clean"

    def why(self) -> str:
        """The hygiene's reasons in words ("" when clean)."""
        if self.hygiene is None:
            return self.unknown
        if self.hygiene == "clean":
            return ""
        return (f"other processes used {self.other_cpu_cores:.2f} of {self.cpu_cores} CPU cores "
                f"over {self.span_s * 1000:.0f} ms (shared from "
                f"{shared_threshold(self.cpu_cores):.2f})")

    def metrics(self) -> dict:
        return {names.HOST_OTHER_CPU_CORES: self.other_cpu_cores,
                names.HOST_CPU_CORES: self.cpu_cores}

    def tags(self) -> dict:
        """host.hygiene and its reasons; empty where it cannot tell (absent, never invented)."""
        if self.hygiene is None:
            return {}
        return {names.HOST_HYGIENE: self.hygiene, names.HOST_HYGIENE_REASONS: self.why()}


def _psutil():
    if not sys.platform.startswith("linux"):
        return None  # other systems count children and steal differently: nothing to record
    try:
        import psutil

        return psutil
    except ImportError:
        return None


def allowed_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


class HostMonitor:
    """Reads the host's CPU counters before and after a measurement: `with HostMonitor() as
    state:`. Where it cannot tell, `state` stays all None, with the reason in `state.unknown`.

    min_span_s: spans shorter than this are below what the 10 ms counters resolve; extend:
    watch on (sleeping) until min_span_s has passed, rather than give None."""

    def __init__(self, min_span_s: float = MIN_SPAN_S, extend: bool = True):
        self.min_span_s = min_span_s
        self.extend = extend
        self.state = HostState()
        self._psutil = _psutil()
        self._start = None

    def _read(self) -> tuple[float, float, float]:
        """(busy seconds of the allowed CPUs, this process's CPU seconds, host clock)."""
        psutil = self._psutil
        if self._every_cpu:  # the total line: summed in ns by the kernel, then one tick's error
            chosen = [psutil.cpu_times()]
        else:
            per_cpu = psutil.cpu_times(percpu=True)
            # /proc/stat lists online CPUs in order; where some are offline an index is not a
            # CPU id, and every CPU's time is taken (others overestimated: never a false clean).
            chosen = [per_cpu[cpu] for cpu in self._cpus] \
                if len(per_cpu) == (os.cpu_count() or 0) else per_cpu
        busy = sum(value for times in chosen for name, value in times._asdict().items()
                   if name not in _IDLE_FIELDS)
        own = self._process.cpu_times()
        mine = own.user + own.system + own.children_user + own.children_system
        return busy, mine, time.perf_counter()

    def __enter__(self) -> HostState:
        if self._psutil is None:
            self.state.unknown = "no CPU counters here (Linux with psutil only)"
            return self.state
        self._cpus = allowed_cpus()
        self._every_cpu = len(self._cpus) == (os.cpu_count() or 0)
        try:
            self._process = self._psutil.Process()
            self._start = self._read()
        except Exception as error:  # a sandbox hiding /proc: nothing to tell, the run goes on
            self.state.unknown = f"the CPU counters could not be read ({error})"
        return self.state

    def __exit__(self, exc_type, *exc) -> None:
        if self._start is None or exc_type is not None:  # a failed measurement: no number
            return
        busy_0, mine_0, clock_0 = self._start
        measured = time.perf_counter() - clock_0
        if self.extend and measured < self.min_span_s:
            time.sleep(self.min_span_s - measured)
        try:
            busy_1, mine_1, clock_1 = self._read()
        except Exception as error:
            self.state.unknown = f"the CPU counters could not be read ({error})"
            return
        state = self.state
        state.span_s, state.measured_s = clock_1 - clock_0, measured
        if state.span_s < self.min_span_s:
            state.unknown = (f"the span ({state.span_s * 1000:.0f} ms) is shorter than the "
                             f"{self.min_span_s * 1000:.0f} ms the CPU counters' 10 ms ticks "
                             f"can resolve")
            return
        state.cpu_cores = len(self._cpus)
        # Ticks on either side can make others' share come out a little below 0: it is 0. The
        # counters are whole ticks: the float sums' last bits (5e-13) are no reading.
        others = max(0.0, (busy_1 - busy_0) - (mine_1 - mine_0)) / state.span_s
        state.other_cpu_cores = round(others, 3)
        state.own_cpu_cores = round((mine_1 - mine_0) / state.span_s, 3)
