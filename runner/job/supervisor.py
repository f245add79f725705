"""The supervising side of a job: start (or reuse) the worker, relay what it records, watch the
time each stage takes, and kill the worker when the kernel hangs, faults or the user interrupts.

The worker runs in a session of its own, so a terminal's Ctrl-C reaches only this process, which
kills the worker's whole process group (a sanitizer wrapping it included) and returns at once.
"""

import atexit
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Optional

from runner.errors import RunError
from runner.job.faults import sanitizer_hint
from runner.job.sanitizers import sanitizer_finding, sanitizer_of
from runner.run.phases import LIMIT_OF, WORKER, metric

POLL_S = 0.2  # how often the supervisor looks at the clock while it waits for the worker

# Set while this process only relays a job's messages, from the answer to its key to its end:
# its record is open and nothing is written until the end, so work done beside it then (gemmlab's
# launcher composing the next configs, the last job's record being written) neither delays the
# job nor waits on this process's MLflow calls, which it would slow (one interpreter lock).
relaying = threading.Event()
START_TIMEOUT_S = 120.0  # a worker's imports; the first job waits for them in `setup`


@dataclass
class JobResult:
    """How a job ended: `status` is ok, cached, refused, failed, impossible or timeout;
    `outcome` the worker's RunOutcome for ok; `reason` a sentence otherwise."""
    status: str
    outcome: Any = None
    reason: str = ""
    key: Optional[str] = None
    report: str = ""  # a sanitizer's whole report
    reusable: bool = False  # the worker may take the next job (no fault, hang or crash)


class Worker:
    """One worker process and the socket to it."""

    def __init__(self, wrapper: tuple[str, ...] = (), env: Optional[dict] = None,
                 log_path: Optional[str] = None):
        ours, theirs = socket.socketpair()
        self.conn = Connection(ours.detach())
        command = [*wrapper, sys.executable, "-m", "runner.job.worker",
                   str(theirs.fileno()), str(os.getpid())]
        self.log_path = log_path
        self.process = subprocess.Popen(command, pass_fds=[theirs.fileno()],
                                        start_new_session=True,
                                        env={**os.environ, **(env or {})})
        theirs.close()

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """The whole process group: the worker, and a sanitizer around it."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.process.kill()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.conn.close()

    def close(self, wait_s: float = 30.0) -> None:
        """Ask the worker to exit (a sanitizer then writes its summary), else kill it."""
        try:
            self.conn.send(("exit",))
            self.process.wait(timeout=wait_s)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        self.kill()

    def death(self) -> str:
        """Why the worker process ended, in words."""
        code = self.process.wait(timeout=10) if self.process.poll() is None else \
            self.process.returncode
        if code is not None and code < 0:
            return f"the worker process died of {signal.Signals(-code).name}"
        return f"the worker process exited with status {code}"


_worker: Optional[Worker] = None


def _shared_worker() -> Worker:
    """The process's worker, started on first use and reused by the jobs that follow."""
    global _worker
    if _worker is None or not _worker.alive():
        _worker = Worker()
    return _worker


def _discard(worker: Worker) -> None:
    global _worker
    worker.kill()
    if worker is _worker:
        _worker = None


@atexit.register
def _close_shared_worker() -> None:
    if _worker is not None:
        _worker.close(wait_s=5)


_next_job = None  # the config of the job after the one running (expect_next)


def expect_next(cfg) -> None:
    """Say which job follows the one about to run (gemmlab's launcher, a sweep's batch): once
    this one ends, its worker prepares what that job shares with no kernel while this process
    records this one and sets the next up (runner/run/ahead.py). None: nothing follows."""
    global _next_job
    _next_job = cfg


def _send_ahead(worker: Worker, result: Optional[JobResult]) -> None:
    """The next job to the worker that ran this one, if it stays (not after a fault, a hang
    or a crash) and measured (a job that reused an earlier measurement is likely followed by
    another: preparing it would only delay that)."""
    global _next_job
    upcoming, _next_job = _next_job, None
    if upcoming is None or result is None or not result.reusable or result.status == "cached":
        return
    try:
        worker.conn.send(("ahead", upcoming))
    except (OSError, ValueError):  # the worker is gone: the next job starts another
        pass


def _send_draw(worker: Worker) -> None:
    """The job after the one about to run, to the worker before that one: it draws the next
    job's inputs while this one runs (runner/run/ahead.py, draw_ahead)."""
    if _next_job is not None:
        try:
            worker.conn.send(("draw", _next_job))
        except (OSError, ValueError):  # the worker is gone: the job reports it
            pass


def _in_shared_worker(cfg) -> bool:
    """Whether `cfg`'s job runs in this process's shared worker (not in this process, not in a
    sanitizer's worker of its own, not on a GPU claimed from a pool)."""
    return bool(cfg.get("isolate", True)) and not sanitizer_of(cfg) and not cfg.get("gpus", 0)


def prepare_first(cfg, compile_request=None) -> None:
    """Have the worker (started now if need be) prepare `cfg`'s job at once, its program
    compiled too where `compile_request` says how (gemmlab's launcher: a batch's first job,
    while this process composes the rest and sets that one up)."""
    if _in_shared_worker(cfg):
        try:
            _shared_worker().conn.send(("ahead", cfg, compile_request))
        except (OSError, ValueError):  # the job starts a worker of its own
            pass


def warm(cfg) -> None:
    """Start the worker and have it open `cfg`'s device while this process imports MLflow
    and composes the sweep's jobs (runner/sweep/callback.py, a sweep's start)."""
    if _in_shared_worker(cfg):
        from omegaconf import OmegaConf

        backend = OmegaConf.to_container(cfg.backend, resolve=True, enum_to_str=True)
        try:
            _shared_worker().conn.send(("warm", backend))
        except (OSError, ValueError):
            pass


def prestart() -> None:
    """Start the worker now, so that its imports overlap the caller's (MLflow's) own."""
    if _worker is None:
        _shared_worker()


def _sanitizer_worker(tool: str, backend_name: str, folder: str) -> Worker:
    """A worker of its own under `tool`, its report written to a file in `folder`."""
    log_path = os.path.join(folder, f"{tool}.txt")
    if tool == "oclgrind":
        if backend_name != "opencl":
            raise RunError("check.sanitizer=oclgrind simulates OpenCL kernels: run it with "
                           "backend=opencl, or use check.sanitizer=memcheck with backend=cuda")
        return Worker(env={"OCLGRIND_DATA_RACES": "1", "OCLGRIND_LOG": log_path},
                      log_path=log_path)
    if backend_name != "cuda":
        raise RunError(f"check.sanitizer={tool} is NVIDIA's compute-sanitizer, for backend=cuda; "
                       "OpenCL kernels are checked with check.sanitizer=oclgrind (on the CPU)")
    executable = shutil.which("compute-sanitizer")
    if executable is None:
        raise RunError(f"check.sanitizer={tool} needs NVIDIA's compute-sanitizer on the PATH; it "
                       "comes with the CUDA toolkit: add its bin folder (e.g. /usr/local/cuda/bin)"
                       " to the PATH")
    wrapper = (executable, "--tool", tool, "--log-file", log_path, "--print-limit", "100",
               *(("--racecheck-report", "all") if tool == "racecheck" else ()))
    return Worker(wrapper, log_path=log_path)


def _limits(cfg) -> dict[str, float]:
    """Seconds each stage may go without a sign of life; under a sanitizer the device work gets
    check.sanitizer_timeout_s, as the tool slows it by orders of magnitude."""
    device_limit = float(cfg.check.sanitizer_timeout_s if sanitizer_of(cfg)
                         else cfg.timing.timeout_s)
    return {"setup": max(float(cfg.timing.timeout_s), START_TIMEOUT_S),
            "compile": float(cfg.timing.compile_timeout_s),
            "check": device_limit, "time": device_limit, "vendor": device_limit}


def _timed_out(phase: str, limit: float, cfg, size_label: str) -> str:
    name = cfg.kernel.name
    if phase == "inspect":
        return (f"{name}'s inspection (PTX and SASS for the record) did not finish within "
                f"{limit:g} s (timing.compile_timeout_s; tracking.inspect=false skips it)")
    phase = LIMIT_OF.get(phase, phase)
    if phase == "compile":
        return (f"{name} did not compile within {limit:g} s: the compiler did not return "
                f"(timing.compile_timeout_s)")
    if phase == "setup":
        return (f"{name} did not start within {limit:g} s: the device or the inputs at "
                f"{size_label} were not ready")
    tool = sanitizer_of(cfg)
    if tool:
        return (f"{name} under {tool} did not finish within {limit:g} s at {size_label}: the "
                f"tool slows a kernel by orders of magnitude (a kernel that never returns ends "
                f"here too); try a smaller size or raise check.sanitizer_timeout_s")
    what = "the vendor library did not return" if phase == "vendor" else \
        "the kernel did not return"
    return (f"{name} did not finish within {limit:g} s at {size_label}: {what} "
            f"(timing.timeout_s)")


def run_job(cfg, recorder, reuse_earlier, size_label: str, bars) -> JobResult:
    """Run one job in a worker and relay its record to `recorder`.

    `reuse_earlier(key)` returns True when an earlier measurement with that key is reused
    instead (the caller records it). `bars` draws the worker's progress bars. KeyboardInterrupt
    (Ctrl-C, SIGTERM) kills the worker and propagates. With `check.sanitizer` the job has a
    worker of its own under the tool, closed after the job so the tool writes its summary
    (killed at a time limit: the reason then adds what the tool had reported so far)."""
    tool = sanitizer_of(cfg)
    if not cfg.get("isolate", True) and not tool:
        return run_in_process(cfg, recorder, reuse_earlier, size_label, bars)
    if not tool:
        worker = _shared_worker()
        _send_draw(worker)
        result = None
        try:
            result = _relay(worker, cfg, recorder, reuse_earlier, size_label, bars)
            _send_ahead(worker, result)
            return result
        finally:
            bars(("end",))
            if result is None or not result.reusable:
                _discard(worker)
    import copy
    import tempfile

    if tool == "oclgrind":  # the simulator is an OpenCL platform of its own
        cfg = copy.deepcopy(cfg)
        cfg.backend.platform = "oclgrind"
        cfg.backend.device_type = "auto"  # Oclgrind calls its device a GPU
        cfg.backend.device = None
    with tempfile.TemporaryDirectory(prefix="gemmlab-sanitizer-") as folder:
        worker = _sanitizer_worker(tool, cfg.backend.name, folder)
        result = None
        try:
            result = _relay(worker, cfg, recorder, reuse_earlier, size_label, bars)
        finally:
            bars(("end",))
            if result is None or result.status == "timeout":
                worker.kill()  # still in the kernel: it would not hear "exit"
            else:
                worker.close()  # the tool writes its summary as the worker exits
        result.report = _read(worker.log_path)
    if result.status == "timeout":  # what the tool had reported before it was stopped
        found = sanitizer_finding(tool, result.report,
                                  cfg.kernel.sources.get(cfg.backend.name) or "", partial=True)
        if found:
            result.reason += f"; before it was stopped, {tool} reported: {found}"
    if tool == "oclgrind" and result.status == "failed" and "matches no platform" in result.reason:
        result.reason = ("check.sanitizer=oclgrind needs the Oclgrind simulator registered as an "
                         "OpenCL platform: pip install 'pyopencl[oclgrind]' (gemmlab's test "
                         "extra has it)")
    return result


class _Relay:
    """What the supervisor does with each message of a job's worker: record, draw, answer.
    `handle` returns the JobResult once the job has ended."""

    def __init__(self, cfg, recorder, reuse_earlier, size_label: str, bars, reply):
        self.cfg, self.recorder, self.reuse_earlier = cfg, recorder, reuse_earlier
        self.size_label, self.bars, self.reply = size_label, bars, reply
        self.limits = _limits(cfg)
        self.phase, self.key = "setup", None
        self.deadline = time.monotonic() + self.limits["setup"]
        self.worker_phases_s = 0.0  # the worker's own account of its stages
        self.in_worker = True

    def limit(self) -> float:
        return self.limits[LIMIT_OF.get(self.phase, self.phase)]

    def handle(self, message: tuple) -> Optional[JobResult]:
        kind, name, key = message[0], self.cfg.kernel.name, self.key
        if kind == "phase":
            self.phase = message[1]
            self.deadline = time.monotonic() + self.limit()
        elif kind == "bar":
            self.deadline = time.monotonic() + self.limit()
            self.bars(message[1:])
        elif kind == "phases":
            self.worker_phases_s = sum(message[1].values())
            self.recorder.metrics({metric(phase): seconds
                                   for phase, seconds in message[1].items()})
        elif kind == "log":
            logging.getLogger(message[1]).log(message[2], message[3])
        elif kind == "record":
            getattr(self.recorder, message[1])(*message[2])
        elif kind == "key":
            self.key = message[1]
            reused = self.reuse_earlier(self.key)
            self.reply("reuse" if reused else "measure")
            if not reused and self.in_worker:  # not a job run in this very process
                relaying.set()
        elif kind == "cached":
            return JobResult("cached", key=key, reusable=True)
        elif kind == "done":
            return JobResult("ok", outcome=message[1], key=key, reusable=True)
        elif kind in ("refused", "failed", "impossible"):
            return JobResult(kind, reason=message[1], key=key, reusable=True)
        elif kind == "fault":
            return JobResult("failed", key=key, reason=(
                f"{name} {message[1]} at {self.size_label}; "
                f"{sanitizer_hint(self.cfg.backend.name)}"))
        elif kind == "crash":
            sys.stderr.write(message[1])
            last = message[1].strip().splitlines()[-1]
            return JobResult("failed", key=key,
                             reason=f"internal error in {name}'s run: {last} (traceback above)")
        return None

    def timed_out(self) -> JobResult:
        return JobResult("timeout", key=self.key, reason=_timed_out(
            self.phase, self.limit(), self.cfg, self.size_label))

    def record_worker_time(self, wall_s: float) -> None:
        """The job's wall in the worker less the stages it timed: the messages, the pickled
        config, a worker's start and imports (the first job of a process)."""
        if self.worker_phases_s:
            self.recorder.metrics({metric(WORKER): max(0.0, wall_s - self.worker_phases_s)})


def _relay(worker: Worker, cfg, recorder, reuse_earlier, size_label: str,
           bars) -> JobResult:
    relay = _Relay(cfg, recorder, reuse_earlier, size_label, bars, worker.conn.send)

    def crashed() -> JobResult:
        return JobResult("failed", key=relay.key, reason=(
            f"{cfg.kernel.name} crashed at {size_label} in its {relay.phase} stage: "
            f"{worker.death()}; {sanitizer_hint(cfg.backend.name)}"))

    started = time.perf_counter()
    worker.conn.send(("job", cfg))
    try:
        while True:
            if not worker.conn.poll(POLL_S):
                if time.monotonic() > relay.deadline:
                    return relay.timed_out()
                if not worker.alive() and not worker.conn.poll(0):
                    return crashed()
                continue
            try:
                message = worker.conn.recv()
            except (EOFError, OSError):
                return crashed()
            result = relay.handle(message)
            if result is not None:
                relaying.clear()
                relay.record_worker_time(time.perf_counter() - started)
                return result
    finally:
        relaying.clear()


class _InProcess:
    """The worker's side of the socket when the job runs in this very process (isolate=false):
    each message is handled as it is sent; the one reply waits in a list."""

    def __init__(self, relay_args: tuple):
        self.replies: list = []
        self.relay = _Relay(*relay_args, reply=self.replies.append)
        self.relay.in_worker = False
        self.result: Optional[JobResult] = None

    def send(self, message: tuple) -> None:
        result = self.relay.handle(message)
        if result is not None:
            self.result = result

    def recv(self):
        return self.replies.pop(0)


def run_in_process(cfg, recorder, reuse_earlier, size_label: str, bars) -> JobResult:
    """The job in the caller's process: no time limits, and a hang or a fault ends the
    caller too, but a debugger can step into the kernel's run."""
    from runner.job.worker import run_job as worker_run_job
    from runner.terminal import progress as progress_bars

    connection = _InProcess((cfg, recorder, reuse_earlier, size_label, bars))
    try:
        worker_run_job(connection, cfg)
    finally:
        progress_bars.forward_to(None)
        bars(("end",))
    return connection.result


def _read(path: Optional[str]) -> str:
    try:
        with open(path, errors="replace") as handle:
            return handle.read()
    except (OSError, TypeError):
        return ""
