"""`gemmlab <overrides>`: the console script, the same as `python -m runner <overrides>`.

`gemmlab --version` answers with gemmlab's version (Hydra's own `--version` would name Hydra's)
and does not compose any config; `gemmlab ui [--uri …] [--port …] [--sweep …]` lists the store's
sweeps, opens one and starts the MLflow UI (runner/ui.py); `gemmlab sync [--uri …]` writes to a
tracking server the records kept while it was not answering (runner/sync.py); every other
argument goes to the Hydra app unchanged.

Errors are one line, `gemmlab: error: …`, exit 1: a config Hydra cannot compose (its message,
which spreads over several lines with the schema's class names, folded into one; a ValueError
raised in Hydra's own code for an override it cannot apply, such as `shape=null`), and a
RunError raised outside a run (a sweep's tracking store that cannot be opened), and a search
that completed no trial. An error that ends a sweep ends its parent run FAILED with that line
as the reason. Ctrl-C and SIGTERM end the run in progress, and a sweep with the jobs it was
running, as KILLED (runner/terminal/interrupts.py) and exit 130 and 143, also when they come
while the process is ending (joblib's workers being shut down): the signal is held until the
exit handlers have run, then the process exits 128 + signal, never with a traceback. A sweep
exits 1 when any job failed, was impossible, timed out or was interrupted, 0 when every job was
measured, reused or refused by the kernel's spec (runner/sweep/callback.py). A single run,
once recorded and printed, ends after the exit handlers without the interpreter's teardown of
MLflow's and SQLAlchemy's modules (half a second of a 2-core CPU).
Output into a pipe that closes early (`gemmlab --help | head`) ends the command quietly, exit
141 (128 + SIGPIPE, as a shell reports a command killed by SIGPIPE).
`HYDRA_FULL_ERROR=1` shows Hydra's own message and stack as before.
"""

import atexit
import os
import signal
import sys

_held: list = []  # SIGINT / SIGTERM that came while the process was ending (_hold_signals)
_holding = False


@atexit.register  # registered first, so run last: after Hydra's, MLflow's and the sweep's
def _exit_with_held_signal() -> None:
    """A signal held while the process ended: exit 128 + signal now that every exit handler
    has run. Else the interpreter's teardown follows, where a signal takes its default action
    (the process ends with it, as a shell expects, and no traceback is printed)."""
    if _held:
        import logging

        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + _held[0])
    if _holding:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)


def _hold_signals(say: bool = True) -> None:
    """From now on SIGINT and SIGTERM are held, not raised: the process is ending, and a
    KeyboardInterrupt would only interrupt an exit handler with a traceback (joblib's
    `_python_exit` joining its workers' manager) and leave exit 0. The first is said in one
    line (`say`) and turns the exit status into 128 + signal; a second ends the process at once."""
    global _holding

    def held(signum, frame):
        if _held:
            os._exit(128 + signum)
        _held.append(signum)
        if say:
            from runner.terminal.interrupts import describe_signal
            from runner.terminal.summary import print_failure

            print_failure(describe_signal(signum) + " as the command was ending; what had "
                          "ended is recorded", None)

    if _holding:
        return
    _holding = True
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, held)


def one_line(error: BaseException) -> str:
    """Hydra's message for a config it cannot compose, on one line: the headline, a list under
    a heading ("Available options in 'kernel':") joined with commas, the OmegaConf cause's first
    line; the config search path, the schema's class names and the HYDRA_FULL_ERROR hint left out."""
    text = str(error).split("Config search path:")[0]
    parts: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[:1] in ("\t", " "):  # an item under a heading, or a detail (full_key, types)
            if parts and parts[-1].endswith((":", ",")):
                parts[-1] += " " + line.strip() + ","
            continue
        parts.append(line.strip())
    message = ""
    for part in (part.rstrip(",") for part in parts):
        message += ("" if not message else " " if message.endswith((".", ":")) else ". ") + part
    cause = error.__cause__
    if cause is not None and str(cause).strip():
        message += ": " + str(cause).strip().splitlines()[0]
    return message or type(error).__name__


def yaml_error_line(error) -> str:
    """A config file that does not parse: the file, the line and column, and what is wrong."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).strip().splitlines()[0]
    if mark is None:
        return f"a config file does not parse as YAML: {problem}"
    return (f"{mark.name} does not parse as YAML: {problem} at line {mark.line + 1}, "
            f"column {mark.column + 1}")


def raised_in(error: BaseException, package) -> bool:
    """Whether the innermost frame of the error's traceback is in `package`'s code."""
    frames = error.__traceback__
    while frames is not None and frames.tb_next is not None:
        frames = frames.tb_next
    if frames is None:
        return False
    return os.path.abspath(frames.tb_frame.f_code.co_filename).startswith(
        os.path.dirname(os.path.abspath(package.__file__)) + os.sep)


def raised_by_hydra(error: BaseException) -> bool:
    """Whether Hydra's own code raised this (its config loader's ValueError for an override it
    cannot apply, e.g. a config group set to null), rather than ours or a library's bug."""
    import hydra

    return raised_in(error, hydra)


NO_COMPLETED_TRIAL = "No trials are completed yet."


def no_completed_trial(error: BaseException) -> bool:
    """Optuna's ValueError when the Optuna sweeper asks for the best trial of a search whose
    every trial failed or was refused."""
    optuna = sys.modules.get("optuna")
    return (isinstance(error, ValueError) and optuna is not None
            and str(error).strip() == NO_COMPLETED_TRIAL and raised_in(error, optuna))


def hydra_value_error_line(error: ValueError) -> str:
    message = str(error).strip().splitlines()[0] if str(error).strip() else "invalid override"
    if "Got NoneType" in message:  # `shape=null`: a group cannot be null, only removed
        message += " (a config group set to null on the command line: remove it with ~group)"
    return message


def _report_errors_on_one_line() -> None:
    """Wrap Hydra's `run_and_report`, which prints a config error over several lines (or a
    stack for any other exception), so that config errors and RunErrors are one line."""
    import hydra._internal.utils as hydra_utils
    from hydra.errors import CompactHydraException
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    from runner.errors import RunError

    hydras_own = hydra_utils.run_and_report
    if getattr(hydras_own, "gemmlab", False):
        return

    def line_of(error: Exception) -> str:
        """The error's one line, or "" where it is a bug whose stack Hydra shows."""
        if isinstance(error.__cause__, RunError):  # raised in a class Hydra instantiated
            error = error.__cause__                # (the search's sampler)
        if isinstance(error, RunError):
            return str(error).strip()
        if isinstance(error, YAMLError):
            return yaml_error_line(error)
        if no_completed_trial(error):
            return ("the search completed no trial: every trial failed or was refused (the "
                    "summary above counts them, with their reasons)")
        if isinstance(error, ValueError):
            return hydra_value_error_line(error) if raised_by_hydra(error) else ""
        if isinstance(error, (CompactHydraException, OmegaConfBaseException)):
            return one_line(error)
        return ""

    def run_and_report(func):
        def guarded():
            try:
                return func()
            except BrokenPipeError:  # Hydra would print a stack for it
                _stdout_closed()
            except Exception as error:
                line = line_of(error)
                if not line or os.environ.get("HYDRA_FULL_ERROR") == "1":
                    first = (str(error).strip().splitlines() or [""])[0][:300]
                    _end_sweep("FAILED", line or f"{type(error).__name__}: {first}")
                    raise  # a bug, or asked for: Hydra shows its stack
                from runner.terminal.summary import print_failure

                _end_sweep("FAILED", line)  # the summary, then the line that ended it
                print_failure(line, None)
                sys.exit(1)
        return hydras_own(guarded)

    run_and_report.gemmlab = True
    hydra_utils.run_and_report = run_and_report


def main() -> None:
    if sys.argv[1:2] == ["ui"]:  # `gemmlab ui`: the MLflow UI, before Hydra sees the argv
        from runner.ui import main as ui

        sys.exit(ui(sys.argv[2:]))
    if sys.argv[1:2] == ["sync"]:  # `gemmlab sync`: records kept while a server was away
        from runner.sync import main as sync

        sys.exit(sync(sys.argv[2:]))
    if sys.argv[1:2] == ["compare"]:  # `gemmlab compare A B`: is B faster than A?
        from runner.results.compare import main as compare

        sys.exit(compare(sys.argv[2:], prog="gemmlab compare"))
    if "--version" in sys.argv[1:]:
        from runner import __version__

        print(f"gemmlab {__version__}")
        return
    from runner.terminal.interrupts import describe, install_sigterm_handler, signal_of

    install_sigterm_handler()
    try:
        _report_errors_on_one_line()
        from runner.app import main as hydra_app

        hydra_app()
    except BrokenPipeError:  # `gemmlab --help | head`: the reader has what it wanted
        _stdout_closed()
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM: the run already says KILLED
        _hold_signals(say=False)
        _held.append(signal_of(interrupt))  # the exit status, whatever comes meanwhile
        if not getattr(interrupt, "reported", False):
            from runner.terminal.summary import print_failure

            print_failure(describe(interrupt), None)
        _end_sweep("KILLED", describe(interrupt))  # with the jobs its launcher was running
        _exit_now(128 + signal_of(interrupt))
    except SystemExit as done:  # a run or a sweep that failed, or a sweep stopped early
        _hold_signals()
        if _single_run_ended and (done.code is None or isinstance(done.code, int)):
            _end_single_run(done.code or 0)
        raise
    _hold_signals()
    if _single_run_ended:
        _end_single_run(0)
    sys.exit(_sweep_exit_code())


_single_run_ended = False  # set by the Hydra app once a single run has ended (single_run_ended)


def single_run_ended() -> None:
    """A single run has ended, recorded and printed: the process exits without the
    interpreter's teardown (runner/app.py calls it; `_end_single_run`). Not for a sweep, whose
    launchers may still have pools to shut down."""
    global _single_run_ended
    _single_run_ended = True


def _end_sweep(status: str, reason: str) -> None:
    """End the sweep this process drives, if one is open (runner/sweep/callback.py)."""
    callback = sys.modules.get("runner.sweep.callback")
    if callback is None:
        return
    try:
        callback.end_active_sweep(status, reason)
    except KeyboardInterrupt as again:  # a second Ctrl-C, held while the parent was written
        from runner.terminal.interrupts import signal_of

        os._exit(128 + signal_of(again))
    except Exception as error:  # the store went away: the error that ended the sweep first
        from runner.terminal.summary import print_failure

        print_failure(f"could not close the sweep's parent run: {type(error).__name__}: "
                      f"{error}", None)


def _sweep_exit_code() -> int:
    callback = sys.modules.get("runner.sweep.callback")
    return 0 if callback is None else callback.sweep_exit_code()


def _stdout_closed() -> None:
    """The reader of stdout went away: exit 141 without a traceback, and without the
    interpreter's second complaint when it flushes stdout at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(141)


def _exit_now(code: int) -> None:
    """Exit within moments of Ctrl-C: the exit handlers run (a sweep's parent run is closed
    there), but not the interpreter's teardown of MLflow's, SQLAlchemy's and the drivers'
    modules, which takes about a second and which an interrupted run has no use for."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _end_single_run(code: int) -> None:
    """A single run's end, without the interpreter's teardown of MLflow's, SQLAlchemy's and the
    drivers' modules (half a second of a 2-core CPU, for nothing): what a normal exit does
    first is done, in its order (threads that are not daemons joined, the exit handlers run:
    the worker closed, the logs flushed, a held signal's exit status), then the process ends.
    Output into a pipe that was closed ends it 141, as `_stdout_closed`."""
    import threading

    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = 141
    except (OSError, ValueError):
        pass
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)
