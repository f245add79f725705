"""`gemmlab <overrides>`: the console script, the same as `python -m runner <overrides>`.

`gemmlab --version` answers with gemmlab's version (Hydra's own `--version` would name Hydra's)
and does not compose any config; `gemmlab ui [--uri …] [--port …]` starts the MLflow UI on the
store (runner/ui.py); every other argument goes to the Hydra app unchanged.

Errors are one line, `gemmlab: error: …`, exit 1: a config Hydra cannot compose (its message,
which spreads over several lines with the schema's class names, folded into one; a ValueError
raised in Hydra's own code for an override it cannot apply, such as `shape=null`), and a
RunError raised outside a run (a sweep's tracking store that cannot be opened). Ctrl-C and
SIGTERM end the run in progress as KILLED (runner/terminal/interrupts.py) and exit 130 and 143.
Output into a pipe that closes early (`gemmlab --help | head`) ends the command quietly, exit
141 (128 + SIGPIPE, as a shell reports a command killed by SIGPIPE).
`HYDRA_FULL_ERROR=1` shows Hydra's own message and stack as before.
"""

import os
import sys


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


def raised_by_hydra(error: BaseException) -> bool:
    """Whether Hydra's own code raised this (its config loader's ValueError for an override it
    cannot apply, e.g. a config group set to null), rather than ours or a library's bug."""
    import hydra

    frames = error.__traceback__
    while frames is not None and frames.tb_next is not None:
        frames = frames.tb_next
    if frames is None:
        return False
    return os.path.abspath(frames.tb_frame.f_code.co_filename).startswith(
        os.path.dirname(os.path.abspath(hydra.__file__)) + os.sep)


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

    def run_and_report(func):
        def guarded():
            try:
                return func()
            except BrokenPipeError:  # Hydra would print a stack for it
                _stdout_closed()
            except (CompactHydraException, OmegaConfBaseException, RunError, YAMLError,
                    ValueError) as error:
                if os.environ.get("HYDRA_FULL_ERROR") == "1":
                    raise
                if isinstance(error, ValueError) and not raised_by_hydra(error):
                    raise  # a bug: Hydra shows its stack
                from runner.terminal.summary import print_failure

                if isinstance(error.__cause__, RunError):  # raised in a class Hydra instantiated
                    error = error.__cause__                # (the search's sampler)
                if isinstance(error, RunError):
                    print_failure(str(error).strip(), None)
                elif isinstance(error, YAMLError):
                    print_failure(yaml_error_line(error), None)
                elif isinstance(error, ValueError):
                    print_failure(hydra_value_error_line(error), None)
                else:
                    print_failure(one_line(error), None)
                sys.exit(1)
        return hydras_own(guarded)

    run_and_report.gemmlab = True
    hydra_utils.run_and_report = run_and_report


def main() -> None:
    if sys.argv[1:2] == ["ui"]:  # `gemmlab ui`: the MLflow UI, before Hydra sees the argv
        from runner.ui import main as ui

        sys.exit(ui(sys.argv[2:]))
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
        if not getattr(interrupt, "reported", False):
            from runner.terminal.summary import print_failure

            print_failure(describe(interrupt), None)
        _exit_now(128 + signal_of(interrupt))


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
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
