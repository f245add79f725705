"""Ctrl-C and SIGTERM held back by runner/terminal/interrupts.py's shielded()."""

import os
import signal
import threading
import time

import pytest

from runner.terminal.interrupts import Terminated, shielded

pytestmark = pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                                reason="signal handlers run in the main thread only")


def _deliver(signum: int = signal.SIGINT) -> None:
    os.kill(os.getpid(), signum)
    for _ in range(100):  # Python runs the handler at the next instruction of the main thread
        time.sleep(0.001)


def test_a_held_signal_is_raised_at_the_end_of_the_outermost_block():
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with shielded():
            with shielded():
                _deliver()
                reached.append("inner")
            reached.append("outer")  # the inner block's end raised nothing
    assert reached == ["inner", "outer"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_held_signal_is_raised_even_when_the_block_fails():
    """A store error must not swallow the Ctrl-C that came while the call waited."""
    with pytest.raises(Terminated) as raised:
        with shielded():
            _deliver(signal.SIGTERM)
            raise OSError("database is locked")
    assert isinstance(raised.value.__context__, OSError)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
