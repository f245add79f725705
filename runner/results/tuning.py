"""The autotuner against the grid: how many Optuna trials reach the grid's best, from MLflow.

    python -m runner.tuning --experiment matmul_9_tuning [--uri sqlite:///mlflow.db] [--out pages]

Reads the newest Optuna sweep and the newest grid sweep (Hydra's basic sweeper) of the
experiment, both recorded as parent runs with their jobs as children, and writes a page and a
plot: the best rate so far against the trial number, the grid's best as a line, the trial that
first reaches it (or does better), and the two sweeps' sizes. Each best is a sweep's fastest
measured run (records.BEST_RULE) at one step, size, backend and device, with its tiling.
"""

import argparse
import datetime as dt
from pathlib import Path
from typing import Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from runner.record import names
from runner.results import runs as recorded  # noqa: E402
from runner.results.runs import MEASURED
from runner.results.records import BEST_RULE
from runner.results.records import best_runs as _best_runs
from runner.results.records import cell as _cell
from runner.results.records import rate as _rate  # noqa: E402
from runner.results.records import rate_text as _rate_text
from runner.results.records import status
from runner.results.records import tiling as _tiling


SEARCH, GRID = "OptunaSweeper", "BasicSweeper"  # the sweepers, as their parent runs record them


def presets_for(experiment: str, group: str) -> list[str]:
    """The presets of conf/<group>/ that record into `experiment` (tracking.experiment)."""
    from omegaconf import OmegaConf

    from runner.config.paths import CONF_DIR

    found = []
    for path in sorted((CONF_DIR / group).glob("*.yaml")):
        try:
            if OmegaConf.select(OmegaConf.load(path), "tracking.experiment") == experiment:
                found.append(path.stem)
        except Exception:  # a preset that does not parse is another command's error
            continue
    return found


def grid_over_search(experiment: str, search=None) -> Optional[str]:
    """The grid command over the space of the search preset that records into `experiment`
    (its kernel and every `choice(...)` as a list), with the search's own size and backend as
    its recorded command gave them; None where no preset's space is a list of choices."""
    import re
    import shlex

    from omegaconf import OmegaConf

    from runner.config.paths import CONF_DIR

    for name in presets_for(experiment, "search"):
        preset = OmegaConf.load(CONF_DIR / "search" / f"{name}.yaml")
        kernel = next((str(entry["override /kernel"]) for entry in preset.get("defaults") or []
                       if isinstance(entry, dict) or OmegaConf.is_dict(entry)
                       if "override /kernel" in entry), None)
        space = OmegaConf.select(preset, "hydra.sweeper.params") or {}
        lists = {key: re.fullmatch(r"\s*choice\((.*)\)\s*", str(value)) for key, value in
                 space.items()}
        if kernel is None or not lists or not all(lists.values()):
            continue
        words = [f"kernel={kernel}", *(f"{key}={found.group(1).replace(' ', '')}"
                                       for key, found in lists.items())]
        if search is not None:  # the search's size, backend, store: from its command
            command = search.data.tags.get(names.COMMAND, "")
            try:
                words += [w for w in shlex.split(command) if "=" in w and not w.startswith(
                    ("-", "+search=", "hydra.", "hydra/", "kernel="))]
            except ValueError:
                pass
        return "python -m runner -m " + " ".join(
            [*words, f"tracking.experiment={experiment}", "tracking.inspect=false"])
    return None


def missing_sweep(experiment: str, sweeper: str, uri: str, search=None) -> str:
    """Which sweep the experiment lacks, in words, and the command that records it."""
    store = "" if uri == recorded.DEFAULT_URI else f" tracking.uri={uri}"
    if sweeper == SEARCH:
        what = "search (an Optuna sweep, +search=<step>)"
        commands = [f"python -m runner -m +search={name}{store}" for name in
                    presets_for(experiment, "search")] or [
            f"python -m runner -m +search=<step> tracking.experiment={experiment}{store}"]
        then = "at the grid's size and backend"
    else:
        what = "grid (a sweep over every listed value, -m key=a,b,…)"
        commands = [f"python -m runner -m +experiment={name}{store}" for name in
                    presets_for(experiment, "experiment")]
        if not commands:
            grid = grid_over_search(experiment, search)
            commands = [f"{grid}{store if 'tracking.uri=' not in grid else ''}" if grid else
                        f"python -m runner -m kernel=<step> kernel.params.<NAME>=a,b,… "
                        f"tracking.experiment={experiment}{store}"]
        then = "at the search's size and backend"
    run = " or ".join(f"`{command}`" for command in commands)
    return (f"experiment {experiment!r} in {uri} has no {what} to compare with; record one "
            f"with {run} ({then}), then run this again")


def newest_sweep(client, experiment_id: str, sweeper: str, experiment: str = "",
                 uri: str = recorded.DEFAULT_URI, search=None):
    parents = recorded.search(client, [experiment_id], f"tags.`{names.SWEEP}` = 'true' and "
                              f"tags.`{names.SWEEP_SWEEPER}` = '{sweeper}'")
    if not parents:
        raise recorded.NoRuns(missing_sweep(experiment or experiment_id, sweeper, uri, search))
    return parents[0]


def trials_in_order(client, parent) -> list:
    runs = recorded.search(client, [parent.info.experiment_id],
                           f"tags.`{names.PARENT_RUN_ID}` = '{parent.info.run_id}'")
    return sorted(runs, key=lambda run: run.info.start_time)


def best_so_far(trials: list, where: Optional[tuple] = None) -> list[Optional[float]]:
    """The best rate after each trial, counting only the trials measured at `where` (a
    records.cell: step, size, backend, device) when given."""
    best, curve = None, []
    for trial in trials:
        rate = _rate(trial) if status(trial) in MEASURED and where in (None, _cell(trial)) \
            else None
        if rate is not None and (best is None or rate > best):
            best = rate
        curve.append(best)
    return curve


def bests(points: list, trials: list) -> tuple:
    """(the grid's best, the search's best or None, whether they are of one cell): each sweep's
    fastest measured run (records.best_runs) at the step, size, backend and device where the
    search did best among those the grid measured too; else each sweep's fastest anywhere."""
    grid, search = _best_runs(points), _best_runs(trials)
    shared = [where for where in search if where in grid]
    if shared:
        where = max(shared, key=lambda c: _rate(search[c]))
        return grid[where], search[where], True
    return (max(grid.values(), key=_rate), max(search.values(), key=_rate, default=None),
            False)


def _refused_trials(trials: list) -> str:
    refused = sum(status(t) == "refused" for t in trials)
    if refused:
        return f"{refused} refused by the constraints, each in a fraction of a second"
    return "none refused: drawn only among the points the spec accepts"


def compare(uri: str, experiment: str, out: Path) -> list[Path]:
    client = recorded.client(uri)
    (experiment_id,) = recorded.experiment_ids(client, experiment)
    search = newest_sweep(client, experiment_id, SEARCH, experiment, uri)
    grid = newest_sweep(client, experiment_id, GRID, experiment, uri, search)
    trials, points = trials_in_order(client, search), trials_in_order(client, grid)
    measured = [run for run in points if status(run) in MEASURED and _rate(run)]
    if not measured:
        raise recorded.NoRuns("the grid sweep has no measured point")
    grid_best, search_best, shared = bests(points, trials)
    curve = best_so_far(trials, _cell(grid_best) if shared else None)
    reached = next((i + 1 for i, best in enumerate(curve)
                    if best is not None and best >= _rate(grid_best)), None)
    unit = "GFLOPS" if names.GFLOPS in grid_best.data.metrics else "GB/s"
    device = grid_best.data.tags.get(names.DEVICE_NAME, "?")
    refused = sum(status(run) == "refused" for run in points)

    out.mkdir(parents=True, exist_ok=True)
    image = out / f"{experiment}.png"
    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs = [i + 1 for i, best in enumerate(curve) if best is not None]
    ax.step(xs, [best for best in curve if best is not None], where="post",
            label="Optuna (TPE): best so far")
    scored = [(i + 1, _rate(t)) for i, t in enumerate(trials)
              if status(t) in MEASURED and _rate(t)]
    ax.scatter([x for x, _ in scored], [y for _, y in scored], s=14, color="tab:blue",
               alpha=0.5, label="a measured trial (refused trials have no point)")
    ax.set_xlim(0, len(trials) + 1)
    ax.axhline(_rate(grid_best), color="k", linestyle="--",
               label=f"grid's best ({len(points)} points, {len(measured)} measured)")
    if reached:
        ax.axvline(reached, color="tab:green", linestyle=":",
                   label=f"trial {reached} reaches it")
    ax.set_xlabel("trial")
    ax.set_ylabel(unit)
    ax.set_title(f"{device}: {experiment}, autotuner against the grid")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(image, dpi=110)
    plt.close(fig)

    size = f"{grid_best.data.params.get(names.M)}x{grid_best.data.params.get(names.N)}x" \
           f"{grid_best.data.params.get(names.K)}"
    lines = [
        f"# Autotuning against the grid: {experiment}", "",
        f"Generated on {dt.date.today().isoformat()} by `python -m runner.tuning --experiment "
        f"{experiment}` from the sweeps recorded in `{uri}`.", "",
        *recorded.provenance([grid_best], uri, extra=(
            f"- kernel {grid_best.data.params.get(names.KERNEL_NAME)} at {size}, backend "
            f"{grid_best.data.params.get(names.BACKEND_NAME)}",), commands_label="grid's best by"),
        f"- grid: parent run `{grid.info.run_id}`, {len(points)} points ({len(measured)} "
        f"measured, {refused} refused by the constraints), "
        f"`{grid.data.tags.get(names.COMMAND, '?')}`",
        f"- search: parent run `{search.info.run_id}`, {len(trials)} trials "
        f"({len(scored)} measured, {_refused_trials(trials)}), "
        f"`{search.data.tags.get(names.COMMAND, '?')}`", "",
        "| | configuration | rate | % of vendor |", "| --- | --- | ---: | ---: |",
        f"| grid's best | {_tiling(grid_best)} | {_rate_text(_rate(grid_best), unit)} | "
        f"{grid_best.data.metrics.get(names.PCT_OF_VENDOR, float('nan')):.1f} |",
    ]
    if search_best is not None:
        lines.append(f"| search's best | {_tiling(search_best)} | "
                     f"{_rate_text(_rate(search_best), unit)} | "
                     f"{search_best.data.metrics.get(names.PCT_OF_VENDOR, float('nan')):.1f} |")
    lines += ["", f"Best: {BEST_RULE}" + (
        "; both sweeps' at the same step, size, backend and device." if shared else
        "; the two sweeps measured no step, size, backend and device in common: each its own.")]
    lines += ["", (f"The search reached the grid's best (or better) at trial **{reached}** of "
                   f"{len(trials)}, against the grid's {len(points)} points."
                   if reached else
                   f"The search did not reach the grid's best in {len(trials)} trials."), "",
              "Points the two sweeps share were measured once: a job whose measurement key "
              "(source, parameters, size, device, driver, runner) matched an earlier run reused "
              "it (status `cached`).", "", f"![{experiment}]({image.name})", ""]
    page = out / f"{experiment}.md"
    page.write_text("\n".join(lines))
    return [page, image]


def main(argv=None) -> list[Path]:
    from runner.results.report import check_uri, reading, writing

    parser = argparse.ArgumentParser(prog="python -m runner.tuning",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", required=True,
                        help="the MLflow experiment both sweeps recorded into (e.g. "
                             "matmul_9_tuning, conf/search/matmul_9.yaml's)")
    parser.add_argument("--uri", default=recorded.DEFAULT_URI, help="MLflow tracking URI")
    parser.add_argument("--out", help=f"folder for the page and plot (default: "
                                      f"./{recorded.DEFAULT_OUT}; docs/ only when named here)")
    args = parser.parse_args(argv)
    check_uri(args.uri)
    out = recorded.out_folder(args.out)
    written = reading(args.uri, lambda: writing(out, lambda: compare(args.uri, args.experiment,
                                                                      out)))
    print(f"wrote {out}/: " + " and ".join(p.name for p in written))
    return written


if __name__ == "__main__":
    main()
