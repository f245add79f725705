"""Where a job's wall time goes: each stage of a run timed, recorded as `time_s/<phase>`.

A run announces each stage as it starts (`execute`'s `on_phase`); the worker's PhaseClock
charges the time since the last announcement to the stage that was running. The supervisor adds
what happens on its side of the socket (opening the MLflow run, the round trips to the worker).
Every stage maps to one of the supervisor's time limits (LIMIT_OF).
"""

import time
from typing import Optional

# The stages in order, each with the time limit that watches it (runner/job/supervisor.py).
LIMIT_OF = {
    "setup": "setup",       # the device and the plan; the measurement key (a cache lookup)
    "inputs": "setup",      # the random inputs drawn on the host, the memory checks
    "compile": "compile",   # the compiler (NVRTC, the OpenCL driver), the resources it reports
    "inspect": "compile",   # PTX and SASS (nvdisasm) for the record; once per program
    "check": "check",       # the first launch and its float64 reference
    "time": "time",         # warm-up and timed samples
    "recheck": "time",      # the launch after timing, checked again
    "energy": "time",       # launches back to back for the work per joule (timing.energy_s)
    "vendor": "vendor",     # the vendor library's baseline and its check
}
PHASES = tuple(LIMIT_OF)

# Recorded beside the stages by the supervisor (runner/app.py, runner/job/supervisor.py).
RECORD_OPEN = "record_open"  # the MLflow run opened, its params and config written
WORKER = "worker"  # the job's wall in the worker less its stages: messages, a worker's start
# Recorded apart: the job's share prepared in the worker before the job was sent
# (runner/run/ahead.py), while the sweep's process was busy between jobs; on no one's clock.
# Its parts as time_s/ahead/<part> (ahead.AHEAD_PARTS).
AHEAD = "ahead"


def metric(phase: str) -> str:
    return f"time_s/{phase}"


class PhaseClock:
    """Seconds per stage: `enter(phase)` ends the stage that was running and starts this one;
    `stop()` ends the last. A stage entered twice adds up."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._phase: Optional[str] = None
        self._since = 0.0

    def enter(self, phase: str) -> None:
        now = time.perf_counter()
        if self._phase is not None:
            self.seconds[self._phase] = self.seconds.get(self._phase, 0.0) + now - self._since
        self._phase, self._since = phase, now

    def stop(self) -> None:
        self.enter(None)  # type: ignore[arg-type]
        self._phase = None

    def metrics(self) -> dict[str, float]:
        return {metric(phase): seconds for phase, seconds in self.seconds.items()}
