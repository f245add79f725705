"""A sweep's bookkeeping: its jobs by status, its wall time, the cost per job beyond the kernels'
own work, and the seconds its jobs spent in each stage (runner/run/phases.py), as the parent's
`gemmlab.sweep.*` tags, its phases.md table and the line printed at the sweep's end."""

from runner.record import names
from runner.results.records import status as _status
from runner.sweep.summary import STATUSES, SweepSummary


def bookkeeping_of(summary: SweepSummary, wall_s: float) -> dict:
    """Jobs by status, wall time and the cost per job beyond the kernels' own work: the
    parent's `gemmlab.sweep.*` tags, never metrics (they would crowd the rates in the charts)."""
    counts = {"jobs": summary.finished, **{status: summary.counts[status] for status in STATUSES}}
    if summary.counts["killed"]:
        counts["killed"] = summary.counts["killed"]
    if summary.finished:  # what a job costs beyond its kernel's checked launch and timing
        work = sum(run.data.metrics.get(names.KERNEL_WORK_S, 0.0) for run in summary.runs
                   if _status(run) == "ok")
        counts["wall_s"] = wall_s
        counts["overhead_s_per_job"] = (wall_s - work) / summary.finished
        for phase, seconds in phase_totals(summary.runs, wall_s).items():
            counts[f"phase_s.{phase}"] = seconds
    return counts


def phase_totals(runs, wall_s: float) -> dict[str, float]:
    """Seconds the sweep's jobs spent in each stage (runner/run/phases.py), largest first, and
    `between_jobs`: the wall time no job accounts for (Hydra composing each job, MLflow writing
    each record at its end, the sweep's own bookkeeping)."""
    from runner.run.phases import PHASES, RECORD_OPEN, WORKER, metric

    totals = {phase: sum(run.data.metrics.get(metric(phase), 0.0) for run in runs)
              for phase in (RECORD_OPEN, *PHASES, WORKER)}
    totals = {phase: seconds for phase, seconds in totals.items() if seconds > 0}
    totals = dict(sorted(totals.items(), key=lambda item: -item[1]))
    if totals:
        totals["between_jobs"] = max(0.0, wall_s - sum(totals.values()))
    return totals


def phases_table(bookkeeping: dict) -> str:
    """The stages' seconds as a Markdown table (the parent's phases.md): total, per job and
    share of the sweep's wall time."""
    jobs, wall = bookkeeping.get("jobs") or 0, bookkeeping.get("wall_s") or 0.0
    rows = [(key[len("phase_s."):], value) for key, value in bookkeeping.items()
            if key.startswith("phase_s.")]
    if not jobs or not rows or not wall:
        return ""
    lines = [f"# Where the time went: {jobs} jobs in {wall:.1f} s", "",
             "| stage | seconds | per job | share of the wall |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {phase.replace('_', ' ')} | {seconds:.2f} | {seconds / jobs:.3f} | "
              f"{100 * seconds / wall:.1f}% |" for phase, seconds in rows]
    return "\n".join(lines) + "\n"


def phases_line(bookkeeping: dict) -> str:
    """`where the time went, s per job: vendor 0.82 · compile 0.45 · …` from the bookkeeping."""
    jobs = bookkeeping.get("jobs") or 0
    phases = {key[len("phase_s."):]: value for key, value in bookkeeping.items()
              if key.startswith("phase_s.")}
    if not jobs or not phases:
        return ""
    return "where the time went, s per job: " + " · ".join(
        f"{phase.replace('_', ' ')} {seconds / jobs:.2f}" for phase, seconds in phases.items())


def tag_value(value) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)
