"""Results pages built from MLflow records, never from stdout: a Markdown page and PNG plots.

    python -m runner.report                      # the latest sweep in ./mlflow.db
    python -m runner.report --experiment sgemm_ladder [--uri sqlite:///mlflow.db] [--out pages]
    python -m runner.report --sweep <parent id, short id or name> [--backend cuda] [--device H200]

Pages go to ./gemmlab-pages/ (printed) unless `--out` names a folder; the project's own pages
in docs/ are rewritten only when `--out docs/…` is given.

For each backend and device: the fastest measured run of every kernel and size (by its rate,
never merely the newest), with its tiling, its rate,
its % of the vendor library of its own precision in the same run (cuBLAS TF32 for a TF32 step,
cuBLAS SGEMM for FP32 and 3xTF32, numpy on a CPU, the device copy for copies), registers,
spills, shared memory, error, the SM clock and whether the GPU or host was clean, and the
commit that measured it; failed and
refused runs with their reasons; the device, driver, date and the exact command that produced
the runs; one line per sweep (an MLflow parent run) with its counts. Plots, one PNG each and
only where there is data: rate against size with the vendor's line, the ladder as bars with
% of vendor, registers and spills per step, OpenCL against CUDA on the same device.

`build_report(runs, title, out_dir, uri)` is the same page for a list of runs already in hand
(what a sweep calls at its end to log the page on its parent run).
"""

import argparse
import re
import shlex
import sys
from pathlib import Path
from typing import Optional

from runner.record import names
from runner.results import runs as recorded
from runner.results.report_page import best_per_cell, failures, render_markdown, sweep_lines
from runner.results.report_plots import PLOTS
from runner.results.runs import as_read_from  # noqa: F401 (read by the tests from here)


def _stem(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "report"


def build_report(runs: list, title: str, out_dir: Path, uri: str, *, name: Optional[str] = None,
                 command: Optional[str] = None, ceilings: Optional[dict] = None) -> list[Path]:
    """Write `<out_dir>/<name>.md` and its PNGs for these runs; return every file, page first.

    `runs` are `mlflow.entities.Run` in any order (sweep parents are left out); `name` defaults
    to `title` made file-safe; `uri` is where they were read (quoted, and used to look up the
    names of their sweeps); each step and size shows its fastest measured run (BEST_RULE of
    runner/results/records.py); `ceilings` (device name -> recorded ceilings, `runs.ceilings`)
    adds each step against its pipe's ceiling. Sets no global MLflow state."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = _stem(name or title)
    runs = sorted((r for r in runs if r.data.tags.get(names.SWEEP) != "true"),
                  key=lambda r: -r.info.start_time)
    table = best_per_cell(runs)
    images = []
    for suffix, caption, plot in PLOTS:
        written = plot(title, table, out_dir / f"{stem}-{suffix}.png") if table else None
        if written is not None:
            images.append((f"{title}: {caption}", written))
    page = render_markdown(title, uri, table, failures(runs), command=command,
                           sweeps=sweep_lines(runs, uri),
                           images=[(c, p.name) for c, p in images], ceilings=ceilings)
    md = out_dir / f"{stem}.md"
    md.write_text(page)
    return [md, *(p for _, p in images)]


def _without_out(arguments: list[str]) -> list[str]:
    """The command as a page names it: where the page was written (`--out`, often a folder of
    the machine that made it) changes nothing on the page."""
    kept, skip = [], False
    for argument in arguments:
        if skip:
            skip = False
        elif argument == "--out":
            skip = True
        elif not argument.startswith("--out="):
            kept.append(argument)
    return kept


def check_uri(uri: str) -> None:
    """`--uri` checked as the runner checks `tracking.uri`: a bare path (`x.db`) is refused with
    the sqlite form to give, a server must answer within seconds and accept this client (its
    host, its credentials: runner/record/server.py); NoRuns (one line) if not."""
    from runner.errors import RunError
    from runner.record.server import check_server, is_server
    from runner.record.store import check_scheme

    try:
        check_scheme(uri)
        if is_server(uri):
            check_server(uri)
    except RunError as error:
        raise recorded.NoRuns(f"--uri {uri}: " + str(error).replace("tracking.uri=", "--uri "))


def reading(uri: str, work):
    """`work()`, with an error of MLflow's while reading the store at `uri` as one line."""
    from mlflow.exceptions import MlflowException

    try:
        return work()
    except MlflowException as error:
        first = (str(error.message).strip().splitlines() or [type(error).__name__])[0]
        raise recorded.NoRuns(f"cannot read the MLflow store at --uri {uri}: {first}; "
                              "allowed: --uri sqlite:///<file>.db or http://host:5000") from None


def writing(out: Path, work):
    """`work()`, with an error creating or writing the `--out` folder as one line."""
    try:
        return work()
    except OSError as error:
        what = error.filename or out
        raise recorded.NoRuns(f"--out {out}: cannot write {what} ({error.strerror or error}); "
                              "allowed: a folder this user can create and write, e.g. "
                              f"--out {recorded.DEFAULT_OUT}") from None


def main(argv=None) -> list[Path]:
    parser = argparse.ArgumentParser(prog="python -m runner.report",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", help="MLflow experiment name (without it and --sweep: "
                                             "the latest sweep)")
    parser.add_argument("--sweep", help="a sweep's parent run id, its first characters (as "
                                        "pages name it) or its run name: only its children")
    parser.add_argument("--backend", help="only this backend (opencl, cuda)")
    parser.add_argument("--device", help="only devices whose name contains this (any case)")
    parser.add_argument("--name", help="page and file stem (default: the experiment's name, "
                                       "or sweep-<first 8 characters of the sweep's id>)")
    parser.add_argument("--uri", default=recorded.DEFAULT_URI, help="MLflow tracking URI")
    parser.add_argument("--out", help=f"folder for the page and plots (default: "
                                      f"./{recorded.DEFAULT_OUT}; docs/ only when named here)")
    args = parser.parse_args(argv)
    check_uri(args.uri)
    out = recorded.out_folder(args.out)
    files = reading(args.uri, lambda: _report(args, argv, out))
    print(f"wrote {out}/: " + ", ".join(f.name for f in files))
    return files


def _report(args, argv, out: Path) -> list[Path]:
    title, name, parent = args.experiment, args.name, None
    client = recorded.client(args.uri)
    if args.sweep is not None:
        parent = recorded.find_sweep(client, args.sweep,
                                     recorded.experiment_ids(client, args.experiment))
    elif args.experiment is None:  # the latest sweep in the store
        parent = recorded.latest_sweep(client, recorded.experiment_ids(client, None))
        if parent is None:
            raise recorded.NoRuns(f"no sweep in {args.uri}: give --experiment, or run a sweep "
                                  "(python -m runner -m …)")
    sweep = None
    if parent is not None:
        sweep = parent.info.run_id
        title = parent.info.run_name or sweep
        name = name or f"sweep-{sweep[:8]}"
    runs = recorded.select(recorded.load_runs(args.uri, args.experiment, sweep), args.backend,
                           args.device)
    if not runs:
        raise recorded.NoRuns("no runs match --backend/--device")
    command = "python -m runner.report " + shlex.join(
        _without_out(argv if argv is not None else sys.argv[1:]))
    ceilings = recorded.ceilings(args.uri, args.experiment)
    return writing(out, lambda: build_report(runs, title, out, args.uri,
                                             name=name or args.experiment, command=command,
                                             ceilings=ceilings))


if __name__ == "__main__":
    main()
