"""A job's worker process: runs the run pipeline for the supervisor, job after job.

Started by `runner.job.supervisor` as `python -m runner.job.worker <fd> <supervisor pid>`
(under compute-sanitizer or Oclgrind when a run asks for one), it talks over the socket `fd`:

    supervisor -> worker   ("job", cfg)  ("reuse" | "measure")  ("exit",)
                           ("ahead", a coming job's cfg[, its CompileRequest])
                           ("draw", the cfg of the job after the one sent next)
                           ("warm", the sweep's backend config as a dict)
    worker -> supervisor   ("phase", name)  ("bar", ...)  ("record", method, args)
                           ("key", measurement key)  ("phases", {phase: seconds}) before
                           the last, which is one of: ("done", outcome),
                           ("cached",), ("refused", reason), ("failed", reason),
                           ("impossible", reason),
                           ("fault", what), ("crash", traceback)

("ahead", cfg) comes between jobs of a sweep (and before a batch's first): the worker prepares
what that job shares with no kernel (runner/run/ahead.py) and answers nothing; the job records
how long that took as `time_s/ahead`, which overlapped the sweep's own work. ("warm", backend)
at a sweep's start opens the device. ("draw", cfg) comes just before a job: the worker draws
the inputs of the job after it in a thread while that job runs (on a GPU). None is answered.

Everything the run would record goes back as ("record", …) at once, so a worker killed halfway
leaves its run recorded with what it had. After a fault or a crash the worker exits: its device
context may be broken, and the next job gets a fresh process.
"""

import logging
import os
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection

# Set in a Slurm job (runner/sweep/slurm.py): Slurm signals every process of a job it cancels
# or warns of its time limit, and the job's main process, not its worker, records the run's end
# in gemmlab's words.
IGNORES_SIGTERM_ENV = "GEMMLAB_WORKER_IGNORES_SIGTERM"

log = logging.getLogger("runner")

# Seconds spent preparing the coming job ahead of it, in all and by part (runner/run/ahead.py,
# prepare_ahead), recorded by that job.
_ahead_s: dict = {}

# The OpenCL devices this process has named in the log (how it was chosen): once each, not
# once per job of a sweep (each run records its device in its tags).
_devices_named: set = set()


class ForwardingRecorder:
    """The recorder `execute` writes to, in the worker: each call goes to the supervisor's."""

    def __init__(self, send):
        self._send = send

    def tags(self, tags) -> None:
        self._send(("record", "tags", ({k: v for k, v in tags.items()},)))

    def metrics(self, metrics) -> None:
        self._send(("record", "metrics", ({k: v for k, v in metrics.items()},)))

    def text(self, text: str, artifact_path: str) -> None:
        self._send(("record", "text", (text, artifact_path)))


class ForwardingHandler(logging.Handler):
    """Log records go to the supervisor, which logs them where Hydra set its logging up."""

    def __init__(self, send):
        super().__init__(logging.INFO)
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._send(("log", record.name, record.levelno, record.getMessage()))
        except Exception:
            self.handleError(record)


def _quiet_after_faults(unraisable) -> None:
    """After a device fault, CuPy's event and module destructors fail with the same sticky
    error as the kernel and print "Exception ignored" tracebacks: the fault is already reported
    in one line, so those are dropped; any other unraisable exception is shown as usual."""
    from runner.job.faults import describe_fault

    if unraisable.exc_value is not None and describe_fault(unraisable.exc_value):
        return
    sys.__unraisablehook__(unraisable)


def _exit_with_supervisor(supervisor_pid: int) -> None:
    """A worker whose supervisor is gone (killed with SIGKILL) ends too, kernel or not."""
    def watch():
        while True:
            time.sleep(0.5)
            try:
                os.kill(supervisor_pid, 0)
            except ProcessLookupError:
                os._exit(3)
            except PermissionError:
                pass
    threading.Thread(target=watch, daemon=True).start()


def run_job(conn: Connection, cfg) -> bool:
    """One job; False when the worker must not be reused (a fault or a crash)."""
    from runner.backends import make_backend
    from runner.config.spec import ProblemSize, plan_kernel
    from runner.errors import ImpossibleResult, Refused, RunError
    from runner.job.faults import describe_fault
    from runner.record import names
    from runner.record.resume import measurement_key
    from runner.run.ahead import finish_drawing
    from runner.run.execute import execute
    from runner.run.guards import drop_staged
    from runner.run.phases import PhaseClock, metric
    from runner.terminal import progress as progress_bars

    global _ahead_s
    clock = PhaseClock()

    def enter(phase: str) -> None:
        clock.enter(phase)
        conn.send(("phase", phase))

    def send(message: tuple) -> None:
        if message[0] in ("done", "cached", "refused", "impossible", "failed", "fault", "crash"):
            clock.stop()  # the job's last message: the time of each stage goes first
            conn.send(("phases", clock.seconds))
        conn.send(message)

    progress_bars.forward_to(conn.send)
    try:
        enter("setup")
        send(("record", "tags", ({names.WORKER_PID: str(os.getpid())},)))
        if _ahead_s:
            send(("record", "metrics", ({metric(part): s for part, s in _ahead_s.items()},)))
            _ahead_s = {}
        finish_drawing(cfg)  # where its own inputs are being drawn (no ahead came for it)
        plan = plan_kernel(cfg.kernel, ProblemSize(cfg.m, cfg.n, cfg.k))
        if cfg.check.get("sanitizer") and cfg.backend.name == "cuda":
            # CuPy's pool hands out pieces of larger allocations, inside which compute-sanitizer
            # sees no bound: each buffer gets a cudaMalloc of its own under the tool.
            import cupy

            cupy.cuda.set_allocator(None)
        backend = make_backend(cfg.backend)
        selection = getattr(backend, "selection_reason", None)
        device = selection and (backend.device_info().name, backend.device_info().platform)
        if selection:
            send(("record", "tags", ({names.DEVICE_SELECTION: selection[:5000]},)))
        if selection and device not in _devices_named:  # once per process and device
            _devices_named.add(device)
            log.info("OpenCL device: %s on %s: %s", *device, selection)
        send(("key", measurement_key(cfg, backend, plan)))
        if conn.recv() == "reuse":
            send(("cached",))
            return True
        outcome = execute(cfg, backend, plan, ForwardingRecorder(send), on_phase=enter)
        send(("done", outcome))
        return True
    except Refused as error:
        send(("refused", str(error)))
        return True
    except ImpossibleResult as error:
        send(("impossible", str(error)))
        return True
    except RunError as error:
        for name, text in error.artifacts().items():  # a compiler's whole log, say
            send(("record", "text", (text, name)))
        fault = describe_fault(error)
        send(("fault", fault) if fault else ("failed", str(error)))
        return fault is None
    except Exception as error:
        fault = describe_fault(error)
        send(("fault", fault) if fault else ("crash", traceback.format_exc()))
        return False
    finally:
        drop_staged()  # what was staged for this job and not taken


def main() -> None:
    global _ahead_s
    if os.environ.get(IGNORES_SIGTERM_ENV):
        for signum in (signal.SIGTERM, signal.SIGUSR2):  # submitit's warning of the limit
            signal.signal(signum, signal.SIG_IGN)
    fd, supervisor_pid = int(sys.argv[1]), int(sys.argv[2])
    _exit_with_supervisor(supervisor_pid)
    sys.unraisablehook = _quiet_after_faults
    conn = Connection(fd)
    logging.basicConfig(level=logging.INFO, handlers=[ForwardingHandler(conn.send)])
    import runner.config.schema  # noqa: F401  (the classes a composed config unpickles into)

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message[0] == "ahead":
            from runner.run.ahead import prepare_ahead

            _ahead_s = prepare_ahead(*message[1:])
            continue
        if message[0] == "draw":
            from runner.run.ahead import draw_ahead

            draw_ahead(message[1])
            continue
        if message[0] == "warm":
            from runner.run.ahead import warm_up

            warm_up(message[1])
            continue
        if message[0] != "job" or not run_job(conn, message[1]):
            break
    sys.stdout.flush()
    sys.stderr.flush()
    # No interpreter teardown: after a fault, CuPy's module unloads would print tracebacks.
    os._exit(0)


if __name__ == "__main__":
    main()
