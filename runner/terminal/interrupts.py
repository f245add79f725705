"""Ctrl-C (SIGINT) and SIGTERM: the run in progress ends KILLED, the process exits 128 + signal.

Python turns SIGINT into KeyboardInterrupt; SIGTERM (a scheduler's or `kill`'s) would end the
process at once, leaving the run RUNNING in MLflow and a sweep's parent open. The command line
installs a handler that raises `Terminated`, a KeyboardInterrupt, so both signals take the same
path: the run records KILLED with the signal's name, a sweep's atexit handler closes its parent,
and the process exits 130 (SIGINT) or 143 (SIGTERM) with one line.
"""

import contextlib
import signal
import threading


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Python would raise KeyboardInterrupt for SIGINT."""

    signum = signal.SIGTERM


class SlurmEnded(Terminated):
    """Slurm's SIGTERM in one of its jobs, in gemmlab's words: `status` is what the run records
    (`killed` for scancel, `timeout` at the time limit), `reason` why (runner/sweep/slurm.py)."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


def status_of(interrupt: BaseException) -> str:
    """What an interrupted run records as its status: `killed`, or `timeout` for a Slurm job
    stopped at its time limit."""
    return getattr(interrupt, "status", "killed")


def signal_of(interrupt: BaseException) -> signal.Signals:
    return signal.Signals(getattr(interrupt, "signum", signal.SIGINT))


def describe(interrupt: BaseException) -> str:
    return getattr(interrupt, "reason", None) or describe_signal(signal_of(interrupt))


def describe_signal(signum: int) -> str:
    signum = signal.Signals(signum)
    return f"interrupted by {signum.name}" + (" (Ctrl-C)" if signum == signal.SIGINT else "")


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def install_sigterm_handler() -> None:
    """SIGTERM raises `Terminated` in the main thread (only there can handlers be set)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)


_shield_depth = 0  # shielded() blocks open in the main thread


@contextlib.contextmanager
def shielded():
    """Hold SIGINT and SIGTERM back while an interrupted run's end is written, or while the
    process is inside a sqlite store's transaction (runner/record/store.py: holding_signals): a
    second Ctrl-C must not leave the run RUNNING. One that came meanwhile is raised when the
    block ends, also when the block failed (the failure is then its context): a store error
    must not swallow the user's Ctrl-C. Blocks nest: an inner one leaves the held signal to
    the outermost, so that a whole run's end is written before it is raised. The signal goes
    to the handler the block found (Python's raises KeyboardInterrupt; the command line's, as
    the process ends, holds it; an ignored one stays ignored)."""
    global _shield_depth
    if threading.current_thread() is not threading.main_thread() or _shield_depth:
        yield
        return
    pending = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.signal(signum, lambda signum, frame: pending.append(signum))
                for signum in held}
    _shield_depth += 1
    try:
        yield
    finally:
        _shield_depth -= 1
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if pending:
            handler = previous[pending[0]]
            if callable(handler):  # Python's (raises), or the command line's as it exits
                handler(pending[0], None)
            elif handler != signal.SIG_IGN:
                raise Terminated() if pending[0] == signal.SIGTERM else KeyboardInterrupt()
