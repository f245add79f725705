"""The runner's own time per job, from tracked sweeps: a sitting's rows for runner_time.md.

docs/benchmarks/runner_time.md holds the question's whole history in one table, a row per tree
and command in a sitting. This script reads a sitting's store(s), adds its rows to that table
(above the line `<!-- runner_time.py adds its rows above this line -->`) and prints the
sitting's figures run by run, for the commit message (`--print` only prints, `--page` names
another page).

Two trees alternated into one store (`--alternated`): on one GPU host, each sweep into
`tracking.experiment=<tree>-<round>` (`old-1`, `new-1`, `old-2`, ...; `new-again` for a run over
the tree's own compile cache), the old tree run from its own checkout
(`cd <it> && PYTHONPATH=$PWD python -m runner -m ...`), GEMMLAB_COMPILE_CACHE=<a new folder>
for each cold run. A tree is the one compared against where its experiments' names start with
`old` or `before`:

    python -m runner -m backend=cuda kernel=matmul_9,matmul_12,matmul_13,matmul_14 \
        shape=square_1024,square_4096,square_8192,4097x4095x4093,1000x1030x999 \
        tracking.uri=sqlite:///s.db tracking.experiment=new-1                 # S20
    python -m runner -m +search=matmul_9 backend=cuda size=4096 hydra.sweeper.n_trials=30 \
        tracking.uri=sqlite:///s.db tracking.experiment=new-1                 # S30
    python docs/benchmarks/runner_time.py --alternated sqlite:///s.db \
        --caches "every cache empty; again" --what "what the new tree changed" [--note "..."]

Before and after from two stores (`--before`, `--after`): the tree before and after in turn,
an empty compile cache for each:

    python -m runner -m backend=cuda kernel=matmul_9,matmul_12,matmul_13,matmul_14 \
        shape=square_1024,square_4096,square_8192,4097x4095x4093,1000x1030x999 \
        tracking.uri=sqlite:///before.db tracking.experiment=sweep          # and after.db
    (the after tree's sweep again, in after.db, tracking.experiment=sweep_again)
    python -m runner -m +search=matmul_9 backend=cuda size=4096 hydra.sweeper.n_trials=30 \
        tracking.uri=sqlite:///before.db                                    # and after.db
    python -m runner backend=cuda kernel=matmul_9 size=4096 tracking.uri=sqlite:///before.db \
        tracking.experiment=m9                                              # three times each
    python docs/benchmarks/runner_time.py --before sqlite:///before.db --after sqlite:///after.db \
        --what "what the tree after changed"

(`--caches`: the caches column of the rows; `--note`: what else the sitting held, printed under
its table.)

The wall times are the sweeps' own (`gemmlab.sweep.wall_s`: from the sweep's start to its last
job's end), the per-job figure the one the sweep prints; the stages are the after tree's
(`gemmlab.sweep.phase_s.*`, which the before tree did not record).
"""

import argparse
import datetime
import math
import statistics
from pathlib import Path

from mlflow.tracking import MlflowClient

from runner.record import names

PAGE = Path(__file__).with_name("runner_time.md")
MARKER = "<!-- runner_time.py adds its rows above this line -->"
COMMANDS = {  # a sweep's overrides (less tracking.* and hydra.*) -> the page's name for them
    "S20": "backend=cuda kernel=matmul_9,matmul_12,matmul_13,matmul_14 "
           "shape=square_1024,square_4096,square_8192,4097x4095x4093,1000x1030x999",
    "S30": "+search=matmul_9 backend=cuda size=4096",
}


def sweep_parent(client: MlflowClient, experiment: str):
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    runs = client.search_runs([found.experiment_id], f"tags.`{names.SWEEP}` = 'true'",
                              order_by=["attributes.start_time DESC"])
    return runs[0] if runs else None


def first_job(client: MlflowClient, parent):
    """A job of the sweep: its device, driver and commit are the page's."""
    runs = client.search_runs([parent.info.experiment_id], max_results=200)
    return next(run for run in runs if run.data.tags.get(names.PARENT_RUN_ID) == parent.info.run_id
                and names.DEVICE_NAME in run.data.tags)


def first_job_after(client: MlflowClient, parent) -> float:
    """Seconds from the sweep's record opening to its first job's."""
    runs = client.search_runs([parent.info.experiment_id], max_results=200)
    starts = [run.info.start_time for run in runs
              if run.data.tags.get(names.PARENT_RUN_ID) == parent.info.run_id
              and names.DEVICE_NAME in run.data.tags]
    return (min(starts) - parent.info.start_time) / 1000


def tag(run, key: str) -> float:
    return float(run.data.tags.get(f"{names.SWEEP_PREFIX}{key}", "nan"))


def duration(parent) -> float:
    """The parent run's own span, from its opening to its close: the command's wall time less
    its start (imports, Hydra composing the command line), the summary and report included."""
    return (parent.info.end_time - parent.info.start_time) / 1000


def prepared_ahead(client: MlflowClient, parent) -> tuple[float, float]:
    """Seconds of the jobs' work prepared in the worker ahead of them (`time_s/ahead`), and
    of those the jobs waited for (`time_s/worker`: their wall in the worker less their stages)."""
    runs = client.search_runs([parent.info.experiment_id],
                              f"tags.`{names.PARENT_RUN_ID}` = '{parent.info.run_id}'")
    return (sum(run.data.metrics.get("time_s/ahead", 0.0) for run in runs),
            sum(run.data.metrics.get("time_s/worker", 0.0) for run in runs))


def rates(client: MlflowClient, experiment: str) -> list[float]:
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    runs = client.search_runs([found.experiment_id], order_by=["attributes.start_time ASC"])
    return [run.data.metrics[names.GFLOPS] for run in runs if names.GFLOPS in run.data.metrics]


def page(before: MlflowClient, after: MlflowClient) -> str:
    """The sitting's figures, printed: each sweep before and after, the after tree's stages
    and what it prepared ahead, matmul_9 at 4096 in both."""
    rows, phases, device, driver, commits = [], None, "", "", {}
    for label, experiment, again in (("20-job CUDA sweep", "sweep", "sweep"),
                                     ("20-job CUDA sweep, after again", "sweep", "sweep_again"),
                                     ("30-trial search", "matmul_9_tuning", "matmul_9_tuning")):
        old, new = sweep_parent(before, experiment), sweep_parent(after, again)
        if old is None or new is None:  # not run in this sitting (or no second run after)
            continue
        rows.append(f"| {label} | {tag(old, 'jobs'):.0f} | {tag(old, 'wall_s'):.1f} s | "
                    f"{tag(new, 'wall_s'):.1f} s | {duration(old):.1f} s | {duration(new):.1f} s | "
                    f"{tag(old, 'overhead_s_per_job'):.2f} s | "
                    f"{tag(new, 'overhead_s_per_job'):.2f} s |")
        if phases is None:
            phases = new
        job = first_job(after, new)
        device = job.data.tags.get(names.DEVICE_NAME, device)
        driver = job.data.tags.get(names.DEVICE_DRIVER, driver)
        commits["after"] = job.data.tags.get(names.GIT_COMMIT, "")
        commits["before"] = first_job(before, old).data.tags.get(names.GIT_COMMIT, "")
    if phases is None:
        return "No sweep of the same experiment in both stores."
    jobs = tag(phases, "jobs")
    stages = sorted(((key[len(names.SWEEP_PREFIX + "phase_s."):], float(value))
                     for key, value in phases.data.tags.items()
                     if key.startswith(names.SWEEP_PREFIX + "phase_s.")), key=lambda kv: -kv[1])
    old_rates, new_rates = rates(before, "m9"), rates(after, "m9")
    day = datetime.datetime.fromtimestamp(phases.info.start_time / 1000,
                                          datetime.timezone.utc).date()
    lines = [
        f"# The runner's own time per job: {device}",
        "",
        f"{device}, driver {driver}, {day}; before: the tree of {commits.get('before', '?')}, "
        f"after: {commits.get('after', '?')}, one sitting, an empty compile cache for each. "
        "Made by `docs/benchmarks/runner_time.py --before … --after …` (its docstring has "
        "the commands).",
        "",
        "| work | jobs | wall before | wall after | parent run before | after "
        "| runner's own time per job before | after |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        "The wall is the sweep's own (`gemmlab.sweep.wall_s`: from its parent run's opening to "
        "its last job's end); the parent run's span adds the summary and report at its end. The "
        "runner's own time per job is what the sweep prints: its wall time less the kernels' "
        "checked launches and timed samples (`time_s/kernel_work`), over its jobs.",
        "",
        f"## Where the sweep's time went, after ({jobs:.0f} jobs)",
        "",
        "| stage | seconds | per job |",
        "| --- | ---: | ---: |",
        *[f"| {stage.replace('_', ' ')} | {seconds:.2f} | {seconds / jobs:.3f} |"
          for stage, seconds in stages],
        "",
    ]
    ahead, waited = prepared_ahead(after, phases)
    if ahead:
        lines += [
            f"Prepared in the worker ahead of the jobs (`time_s/ahead`: inputs, references, "
            f"guarded buffers, cuBLAS baselines, a batch's first program): {ahead:.2f} s, "
            f"{ahead / jobs:.3f} s per job, beside the sweep's own work between the jobs; the "
            f"jobs waited for {waited:.2f} s of it (`worker` above).",
            "",
        ]
    if old_rates and new_rates:
        lines += [
            "## matmul_9 at 4096, alternating (`python -m runner backend=cuda kernel=matmul_9 "
            "size=4096`)",
            "",
            f"before: {', '.join(f'{rate:,.0f}' for rate in old_rates)} GFLOPS; after: "
            f"{', '.join(f'{rate:,.0f}' for rate in new_rates)} GFLOPS; medians "
            f"{statistics.median(old_rates):,.0f} and {statistics.median(new_rates):,.0f} "
            f"({100 * (statistics.median(new_rates) / statistics.median(old_rates) - 1):+.2f}%).",
            "",
        ]
    return "\n".join(lines)


def alternated_sweeps(client: MlflowClient) -> list:
    """(start, experiment, parent run) of each `<tree>-<round>` sweep in the store, in order."""
    sweeps = []
    for experiment in client.search_experiments():
        parent = sweep_parent(client, experiment.name) if "-" in experiment.name else None
        if parent is not None:
            sweeps.append((parent.info.start_time, experiment.name, parent))
    return sorted(sweeps, key=lambda sweep: sweep[0])


def alternated_page(client: MlflowClient, store: str, note: str = "") -> str:
    """The sitting's figures, printed: one line per sweep of the trees alternated into one
    store, in the order they ran; `note` (what the sitting held apart from the commands:
    caches, the host) under the table."""
    sweeps = alternated_sweeps(client)
    rows, device, driver = [], "", ""
    for _, name, parent in sweeps:
        job = first_job(client, parent)
        device = job.data.tags.get(names.DEVICE_NAME, device)
        driver = job.data.tags.get(names.DEVICE_DRIVER, driver)
        jobs = tag(parent, "jobs")
        checks = tag(parent, "phase_s.check") + tag(parent, "phase_s.recheck")

        def per_job(seconds: float) -> str:  # — where the tree recorded no phases
            return "—" if math.isnan(seconds) else f"{seconds / jobs:.2f} s"

        rows.append(f"| {name} | `{job.data.tags.get(names.GIT_COMMIT, '?')}` | {jobs:.0f} | "
                    f"{tag(parent, 'wall_s'):.1f} s | {first_job_after(client, parent):.1f} s | "
                    f"{per_job(checks)} | {per_job(tag(parent, 'phase_s.record_open'))} | "
                    f"{per_job(tag(parent, 'phase_s.worker'))} | "
                    f"{per_job(tag(parent, 'phase_s.between_jobs'))} | "
                    f"{tag(parent, 'overhead_s_per_job'):.2f} s |")
    day = datetime.datetime.fromtimestamp(sweeps[0][0] / 1000, datetime.timezone.utc).date()
    what = " ".join(word for word in sweeps[0][2].data.tags.get(
        f"{names.SWEEP_PREFIX}overrides", "?").split() if not word.startswith("tracking."))
    caches = ("the caches as the note under the table says" if note
              else "an empty compile cache for each run")
    return "\n".join([
        f"# The runner's own time per job, two trees alternated: {device}",
        "",
        f"{device}, driver {driver}, {day}, one sitting, {caches}. "
        f"Made by `docs/benchmarks/runner_time.py --alternated {store}` (its docstring has the "
        f"commands): `python -m runner -m {what}`, in the order the runs were made.",
        "",
        "| run | commit | jobs | wall | first job after | check and recheck per job "
        "| record opening per job | wait for the worker per job | between jobs per job "
        "| runner's own time per job |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        "The wall is the sweep's own (`gemmlab.sweep.wall_s`); the first job's record opens that "
        "long after the sweep's. The runner's own time per job is "
        "what the sweep prints: the wall less `time_s/kernel_work`, which spans the checked "
        "launch and its check, the timed samples and the check after them; so a faster check "
        "shortens the wall, not that figure.",
        "",
        *([note, ""] if note else []),
    ])


def command(parent) -> str:
    """The sweep's command as the page names it (S20, S30), or in full."""
    words = [word for word in parent.data.tags.get(names.SWEEP_OVERRIDES, "?").split()
             if not word.startswith(("tracking.", "hydra."))]
    for label, overrides in COMMANDS.items():
        if sorted(words) == sorted(overrides.split()):
            return label
    return f"`python -m runner -m {' '.join(words)}`"


def commit_of(client: MlflowClient, parent) -> str:
    return first_job(client, parent).data.tags.get(names.GIT_COMMIT, "?")[:7]


def again(experiment: str) -> bool:
    """A run over its tree's own compile cache (`new-again`, `after-rerun`)."""
    return "again" in experiment or "rerun" in experiment


def figures(runs: list, key: str, spread: bool) -> str:
    """A cell: the runs' figures in order (a range from three on, where `spread`), then the
    runs again over their compile cache."""
    def listed(values):
        if spread and len(values) > 2:
            return f"{min(values):.1f}–{max(values):.1f}"
        return ", ".join(f"{value:.1f}" if spread else f"{value:.2f}" for value in values)
    cold = [tag(parent, key) for name, parent in runs if not again(name)]
    warm = [tag(parent, key) for name, parent in runs if again(name)]
    return "; ".join(part for part in (listed(cold), warm and f"again {listed(warm)}") if part)


def history_row(day, commits: set, against: set, what_ran: str, caches: str, tree: list,
                other: list, what: str) -> str:
    """One row of the page's history table: a tree and a command in one sitting."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|") or "—"
    return " | ".join([
        f"| {day}", ", ".join(f"`{c}`" for c in sorted(commits)) or "—",
        ", ".join(f"`{c}`" for c in sorted(against)) or "—", what_ran, cell(caches),
        cell(figures(tree, "overhead_s_per_job", False)),
        cell(figures(other, "overhead_s_per_job", False)),
        cell(figures(tree, "wall_s", True)), cell(figures(other, "wall_s", True)),
        cell(what)]) + " |"


def day_of(start_ms: int) -> datetime.date:
    return datetime.datetime.fromtimestamp(start_ms / 1000, datetime.timezone.utc).date()


def alternated_rows(client: MlflowClient, caches: str, what: str) -> list[str]:
    """A row per command of the sitting: the tree's runs against the old tree's."""
    sweeps = alternated_sweeps(client)
    by_command = {}
    for _, name, parent in sweeps:
        old = name.split("-")[0] in ("old", "before")
        by_command.setdefault(command(parent), ([], []))[old].append((name, parent))
    rows = []
    for what_ran, (tree, other) in by_command.items():
        rows.append(history_row(
            day_of(sweeps[0][0]), {commit_of(client, parent) for _, parent in tree},
            {commit_of(client, parent) for _, parent in other}, f"{what_ran}, alternated",
            caches, tree, other, what))
    return rows


def before_after_rows(before: MlflowClient, after: MlflowClient, caches: str,
                      what: str) -> list[str]:
    """A row per command run before and after: the sweep (and its second run), the search."""
    rows = []
    for experiments in (("sweep", "sweep_again"), ("matmul_9_tuning",)):
        old = sweep_parent(before, experiments[0])
        new = [(experiment, parent) for experiment in experiments
               if (parent := sweep_parent(after, experiment)) is not None]
        if old is None or not new:
            continue
        # a second run after is not a run over the compile cache: name it as a round
        tree = [(f"after-{i}", parent) for i, (_, parent) in enumerate(new, 1)]
        rows.append(history_row(
            day_of(new[0][1].info.start_time), {commit_of(after, p) for _, p in new},
            {commit_of(before, old)}, command(old), caches, tree, [("before-1", old)], what))
    return rows


def add_rows(page_path: Path, rows: list[str]) -> None:
    """The rows at the end of the page's history table (the last table line above MARKER)."""
    lines = page_path.read_text().splitlines()
    if MARKER not in lines:
        raise SystemExit(f"{page_path} has no line {MARKER!r}: give --print, or add it under "
                         "the history table")
    at = lines.index(MARKER)
    last = max(i for i in range(at) if lines[i].startswith("|"))
    lines[last + 1:last + 1] = rows
    page_path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="the store of the tree before")
    parser.add_argument("--after", help="the store of the tree after")
    parser.add_argument("--alternated", help="one store of two trees' sweeps, alternated")
    parser.add_argument("--caches", default="an empty compile cache each",
                        help="the rows' caches column")
    parser.add_argument("--what", default="", help="the rows' column: what the tree changed")
    parser.add_argument("--note", default="", help="a paragraph under the printed table")
    parser.add_argument("--page", type=Path, default=PAGE, help=f"default {PAGE}")
    parser.add_argument("--print", action="store_true", help="print the rows, write nothing")
    args = parser.parse_args()
    if args.alternated:
        client = MlflowClient(args.alternated)
        detail = alternated_page(client, args.alternated, args.note)
        rows = alternated_rows(client, args.caches, args.what)
    elif args.before and args.after:
        before, after = MlflowClient(args.before), MlflowClient(args.after)
        detail = page(before, after) + (f"\n{args.note}\n" if args.note else "")
        rows = before_after_rows(before, after, args.caches, args.what)
    else:
        parser.error("give --before and --after, or --alternated")
    print(detail)
    print("\n".join(rows))
    if not args.print:
        add_rows(args.page, rows)
        print(f"added {len(rows)} row(s) to {args.page}")


if __name__ == "__main__":
    main()
