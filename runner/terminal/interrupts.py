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


def signal_of(interrupt: BaseException) -> signal.Signals:
    return signal.Signals(getattr(interrupt, "signum", signal.SIGINT))


def describe(interrupt: BaseException) -> str:
    signum = signal_of(interrupt)
    return f"interrupted by {signum.name}" + (" (Ctrl-C)" if signum == signal.SIGINT else "")


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def install_sigterm_handler() -> None:
    """SIGTERM raises `Terminated` in the main thread (only there can handlers be set)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)


@contextlib.contextmanager
def shielded():
    """Hold SIGINT and SIGTERM back while an interrupted run's end is written: a second Ctrl-C
    must not leave the run RUNNING. One that came meanwhile is raised when the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.signal(signum, lambda signum, frame: pending.append(signum))
                for signum in held}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if pending:
        raise Terminated() if pending[0] == signal.SIGTERM else KeyboardInterrupt()
