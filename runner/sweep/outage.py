"""A sweep on a tracking server that was not answering: the records its jobs kept in the spool
(runner/record/spool.py) written back, its end waiting for the server, or kept there too.

`write_kept(uri, handlers)` writes what the spool keeps for the server (the sweep's callback
passes the handler of a sweep's end, `write_kept_end`) and says in one line what it wrote;
`wait_for_server(uri)` waits up to GEMMLAB_SERVER_WAIT_S (60 s) for a server that is down, saying
so; `keep_end(uri, parent, record)` keeps a sweep's end in the spool, one line, and the command
exits 1 (runner/sweep/callback.py sets the exit status)."""

import os
import time
from typing import Callable

from runner.record import spool
from runner.record.server import answers

WAIT_ENV, WAIT_S = "GEMMLAB_SERVER_WAIT_S", 60.0  # a sweep's end waits this long for its server


def write_kept(uri: str, handlers: dict[str, Callable], say: bool = True) -> spool.Replayed:
    """Write the spool's records for `uri` (runs, then the kinds in `handlers`); nothing to
    write costs one look at a folder. With `say`: a line for what was written, and an error
    line for what the server refused (moved to failed/)."""
    if not spool.pending(uri):
        return spool.Replayed(folder=spool.spool_folder(uri))
    done = spool.replay(uri, handlers)
    if not say:
        return done
    from runner.terminal.summary import error_console, print_failure

    if done.written:
        error_console.print(f"gemmlab: {done.line(uri)}", markup=False, highlight=False,
                            soft_wrap=True)
    if done.failed:
        path, reason = done.failed[0]
        print_failure(f"the MLflow server at {uri} refused {len(done.failed)} kept record(s), "
                      f"moved to {path.parent} with the reason beside each: {reason}", None)
    return done


def wait_s() -> float:
    try:
        return max(0.0, float(os.environ.get(WAIT_ENV, WAIT_S)))
    except ValueError:
        return WAIT_S


def wait_for_server(uri: str) -> bool:
    """Wait up to wait_s() for the server at `uri` to answer /health, saying so in one line;
    whether it does."""
    from runner.terminal.summary import error_console

    waiting = wait_s()
    if waiting > 0:
        error_console.print(f"gemmlab: the sweep's jobs have ended; waiting up to {waiting:g} s "
                            f"for the MLflow server at {uri} to answer ({WAIT_ENV}), to write "
                            "what it could not take", markup=False, highlight=False,
                            soft_wrap=True)
    deadline = time.monotonic() + waiting
    while time.monotonic() < deadline:
        if answers(uri):
            return True
        time.sleep(1.0)
    return answers(uri)


def keep_end(uri: str, parent: str, record: dict) -> None:
    """A sweep's end (`record`: what its callback needs to write it later) kept in the spool
    beside its jobs' records; one line saying where and what writes them."""
    from runner.terminal.summary import print_failure

    kept = len(spool.pending(uri))
    try:
        path = spool.keep(uri, spool.SWEEP_END, parent, record)
    except OSError as error:
        path, kept = None, f"{kept}; the sweep's own end lost: {error}"
    if path is None and spool.spool_folder(uri) is None:
        print_failure(f"the MLflow server at {uri} did not answer by the sweep's end, and the "
                      f"spool is off ({spool.SPOOL_ENV}=off): its records are lost", None)
        return
    kept = kept + 1 if path is not None else kept
    where = spool.spool_folder(uri)
    print_failure(f"the MLflow server at {uri} did not answer by the sweep's end: its end and "
                  f"its jobs' records ({kept} in all) are kept in {where}; gemmlab sync --uri "
                  f"{uri} writes them once it answers (so does the next gemmlab command on this "
                  "tracking.uri)", None)
