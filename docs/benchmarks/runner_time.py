"""The runner's own time per job, before and after, as a page, from two stores of one sitting.

On one GPU host, in an empty folder, the tree before (`before`) and after (`after`) in turn, an
empty compile cache for each (GEMMLAB_COMPILE_CACHE=<a new folder>); the page quotes them:

    python -m runner -m backend=cuda kernel=matmul_9,matmul_12,matmul_13,matmul_14 \
        shape=square_1024,square_4096,square_8192,4097x4095x4093,1000x1030x999 \
        tracking.uri=sqlite:///before.db tracking.experiment=sweep          # and after.db
    (the after tree's sweep again, in after.db, tracking.experiment=sweep_again: the page shows
    both of its runs beside the one before)
    python -m runner -m +search=matmul_9 backend=cuda size=4096 hydra.sweeper.n_trials=30 \
        tracking.uri=sqlite:///before.db                                    # and after.db
    python -m runner backend=cuda kernel=matmul_9 size=4096 tracking.uri=sqlite:///before.db \
        tracking.experiment=m9                                              # three times each
    python docs/benchmarks/runner_time.py --before sqlite:///before.db --after sqlite:///after.db \
        --out docs/benchmarks/runner_time_h100.md

Runs of two trees alternated into one store (`--alternated`, its own page): each sweep above
into `tracking.experiment=<tree>-<round>` (`old-1`, `new-1`, `old-2`, ...), the old tree run from
its own checkout (`cd <it> && PYTHONPATH=$PWD python -m runner -m ...`):

    python docs/benchmarks/runner_time.py --alternated sqlite:///s42.db \
        --out docs/benchmarks/runner_time_h100_alternated.md
    python docs/benchmarks/runner_time.py --alternated sqlite:///s49.db \
        --out docs/benchmarks/runner_time_h100_composing.md
    python docs/benchmarks/runner_time.py --alternated sqlite:///s49g.db \
        --out docs/benchmarks/runner_time_h100_record_ends.md
    python docs/benchmarks/runner_time.py --alternated sqlite:///s49t.db \
        --out docs/benchmarks/runner_time_h100_search.md                  # the 30-trial search
    python docs/benchmarks/runner_time.py --alternated sqlite:///s50c.db \
        --out docs/benchmarks/runner_time_h100_issue.md --note "..."       # the issue's tree
    python docs/benchmarks/runner_time.py --alternated sqlite:///s50c_search.db \
        --out docs/benchmarks/runner_time_h100_issue_search.md --note "..."
    python docs/benchmarks/runner_time.py --alternated sqlite:///s50f.db \
        --out docs/benchmarks/runner_time_h100_cold.md --note "..."        # every cache empty
    python docs/benchmarks/runner_time.py --alternated sqlite:///s51c.db \
        --out docs/benchmarks/runner_time_h100_pool_nvml.md --note "..."   # the pool and NVML
    python docs/benchmarks/runner_time.py --alternated sqlite:///s51e.db \
        --out docs/benchmarks/runner_time_h100_compile_lock.md --note "..." # the compile lock
    python docs/benchmarks/runner_time.py --alternated sqlite:///s52c.db \
        --out docs/benchmarks/runner_time_h100_pool_prestarted.md --note "..."  # pool at start
(`--note`: what the sitting held apart from the commands, written under the table; each page
shows its own.)

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


def sweep_parent(client: MlflowClient, experiment: str):
    found = client.get_experiment_by_name(experiment)
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
    rows, phases, device, driver, commits = [], None, "", "", {}
    for label, experiment, again in (("20-job CUDA sweep", "sweep", "sweep"),
                                     ("20-job CUDA sweep, after again", "sweep", "sweep_again"),
                                     ("30-trial search", "matmul_9_tuning", "matmul_9_tuning")):
        old, new = sweep_parent(before, experiment), sweep_parent(after, again)
        if new is None:  # no second run of the tree after
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
        "Made by `docs/benchmarks/runner_time.py` (its docstring has the commands) from "
        "`before.db` and `after.db`.",
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


def alternated_page(client: MlflowClient, store: str, note: str = "") -> str:
    """One row per sweep of the trees alternated into one store, in the order they ran; `note`
    (what the sitting held apart from the commands: caches, the host) under the table."""
    sweeps = []
    for experiment in client.search_experiments():
        parent = sweep_parent(client, experiment.name) if "-" in experiment.name else None
        if parent is not None:
            sweeps.append((parent.info.start_time, experiment.name, parent))
    sweeps.sort()
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="the store of the tree before")
    parser.add_argument("--after", help="the store of the tree after")
    parser.add_argument("--alternated", help="one store of two trees' sweeps, alternated")
    parser.add_argument("--note", default="", help="a paragraph under an --alternated table")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.alternated:
        args.out.write_text(alternated_page(MlflowClient(args.alternated), args.alternated,
                                            args.note))
    elif args.before and args.after:
        args.out.write_text(page(MlflowClient(args.before), MlflowClient(args.after)))
    else:
        parser.error("give --before and --after, or --alternated")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
