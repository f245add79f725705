"""What the Slurm path costs per job against the local launcher: cluster_overhead.md from
tracked sweeps.

One sitting, on one machine running a one-node Slurm (`python tests/services.py slurm`) and an
`mlflow server` (`python tests/services.py mlflow … 5055`): the same 8 jobs with gemmlab's
local launcher and with `hydra/launcher=slurm_cpu`, alternated, into one experiment:

    COMMON="backend.device_type=cpu kernel=matmul_1,matmul_2 size=64,96,128,160 +rerun=true \
        timing.repeats=20 timing.warmup=1 tracking.uri=http://127.0.0.1:5055 \
        tracking.experiment=cluster_overhead"
    for round in 1 2; do for launcher in gemmlab slurm_cpu; do
        python -m runner -m hydra/launcher=$launcher $COMMON; done; done
    python docs/benchmarks/cluster_overhead.py --uri http://127.0.0.1:5055

The page's figures are the sweeps' own records: `gemmlab.sweep.wall_s` (from the sweep's start
to its last job's end), `gemmlab.sweep.overhead_s_per_job` (that wall time less the kernels'
checked launches and timing, per job: what the sweep prints) and the jobs' stages
(`gemmlab.sweep.phase_s.*`).
"""

import argparse
import datetime
import statistics
from pathlib import Path

from mlflow.tracking import MlflowClient

from runner.record import names

PAGE = Path(__file__).with_name("cluster_overhead.md")
STAGES = ("record_open", "between_jobs")  # where the two launchers differ


def sweeps(client: MlflowClient, experiment: str) -> list:
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise SystemExit(f"no experiment '{experiment}' in {client.tracking_uri}")
    return client.search_runs([found.experiment_id], f"tags.`{names.SWEEP}` = 'true'",
                              order_by=["attributes.start_time ASC"])


def figure(run, key: str) -> float:
    return float(run.data.tags.get(f"{names.SWEEP_PREFIX}{key}", "nan"))


def driver_of(client: MlflowClient, parent) -> str:
    """The OpenCL driver one of the sweep's jobs recorded (the parent records no driver)."""
    jobs = client.search_runs([parent.info.experiment_id],
                              f"tags.`{names.PARENT_RUN_ID}` = '{parent.info.run_id}'",
                              max_results=20)
    return next((job.data.tags[names.DEVICE_DRIVER] for job in jobs
                 if names.DEVICE_DRIVER in job.data.tags), "?")


def page(runs: list, uri_words: str, driver: str) -> str:
    first = runs[0].data.tags
    when = datetime.datetime.fromtimestamp(runs[0].info.start_time / 1000, datetime.timezone.utc)
    rows, by_launcher = [], {}
    for number, run in enumerate(runs, start=1):
        launcher = run.data.tags.get(names.SWEEP_LAUNCHER, "?")
        jobs = int(figure(run, "jobs"))
        wall, overhead = figure(run, "wall_s"), figure(run, "overhead_s_per_job")
        stages = " · ".join(f"{stage.replace('_', ' ')} {figure(run, f'phase_s.{stage}') / jobs:.2f}"
                            for stage in STAGES)
        by_launcher.setdefault(launcher, []).append(overhead)
        rows.append(f"| {number} | {launcher} | {jobs} | {wall:.1f} | {overhead:.2f} | {stages} |")
    local = statistics.median(by_launcher.get("GemmlabLauncher", [float("nan")]))
    slurm = statistics.median(by_launcher.get("GemmlabSlurmLauncher", [float("nan")]))
    return "\n".join([
        "# The Slurm path's cost per job",
        "",
        f"**In short:** on a one-node Slurm cluster of the same machine, recording on an `mlflow "
        f"server`, a job costs **{slurm:.2f} s** beyond its kernels' own work through "
        f"`hydra/launcher=slurm_cpu` against **{local:.2f} s** through gemmlab's local launcher "
        f"(medians of the sweeps below, the same 8 jobs). The difference is Slurm's: each job "
        f"is a process of its own that imports gemmlab, MLflow and the OpenCL runtime, opens "
        f"its run over HTTP and starts its worker (`record open`), and the exclusive jobs start "
        f"one after another as Slurm schedules them (`between jobs`), where the local launcher "
        f"runs every job in one process with a worker that stays.",
        "",
        f"Machine: {first.get(names.DEVICE_NAME, '?')} (OpenCL on the CPU, 2 cores, driver "
        f"{driver}), slurm-wlm 22.05 (slurmctld and slurmd of `python tests/services.py "
        f"slurm`, whose main scheduler runs every 2 s: `SchedulerParameters=sched_interval=2`"
        f"), MLflow "
        f"3.17 server ({uri_words}); {when:%Y-%m-%d}, gemmlab "
        f"{first.get(names.GIT_COMMIT, '?')[:7]}.",
        "",
        "Command (the two launchers alternated, two rounds):",
        "",
        "```bash",
        "COMMON=\"backend.device_type=cpu kernel=matmul_1,matmul_2 size=64,96,128,160 "
        "+rerun=true timing.repeats=20 timing.warmup=1 tracking.uri=http://127.0.0.1:5055 "
        "tracking.experiment=cluster_overhead\"",
        "python -m runner -m hydra/launcher=gemmlab $COMMON     # the local launcher (default)",
        "python -m runner -m hydra/launcher=slurm_cpu $COMMON   # SLURM_CONF=<the one-node "
        "cluster's>",
        "python docs/benchmarks/cluster_overhead.py --uri http://127.0.0.1:5055",
        "```",
        "",
        "| sweep | launcher | jobs | wall s | s per job beyond the kernels | of which per job: "
        "s |",
        "| ---: | --- | ---: | ---: | ---: | --- |",
        *rows,
        "",
        "What this does not say: a real cluster adds its scheduler's interval and its nodes' "
        "start-up (a shared filesystem's imports, a GPU's context) to `between jobs` and "
        "`record open`; there a job's cost is set by the cluster, and a sweep of jobs of a "
        "few seconds each gains from the local launcher on one node, a sweep of long jobs from "
        "the cluster's many.",
        "",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", required=True)
    parser.add_argument("--experiment", default="cluster_overhead")
    parser.add_argument("--uri-words", default="`python tests/services.py mlflow`, on loopback")
    args = parser.parse_args()
    client = MlflowClient(args.uri)
    runs = sweeps(client, args.experiment)
    PAGE.write_text(page(runs, args.uri_words, driver_of(client, runs[0])))
    print(f"wrote {PAGE} from {len(runs)} sweeps")


if __name__ == "__main__":
    main()
