"""A multirun as one MLflow parent run with its jobs as children, through Hydra's own callback.

`SweepRecorder` is registered in `conf/config.yaml` (`hydra.callbacks`). In the process that
drives the sweep it opens the parent run before any job starts (creating the store once, so that
parallel jobs never race in its schema setup), hands the parent's id to every job through the
environment (inherited by joblib's workers and submitit's jobs alike), shows a progress bar fed
by the children MLflow has recorded (whichever launcher runs them), and at the end logs the
sweep's summary table, counts with reasons and plots on the parent and prints the best
configuration per kernel and size. Single runs never see any of this.

What the parent carries for MLflow's UI: its name says what was swept; its description leads
with a size × kernel table of the best rate and its % of the vendor library of each step's own
precision (the winner per size marked, the jobs timed on a GPU or host that was not clean
listed with their clock), then what the sweep was and where its report is; the counts, wall
time and overhead per job are tags (`gemmlab.sweep.jobs` …). Under it, beside the jobs, its
series runs (tag `gemmlab.series`, status `series`: never a job): one per kernel and backend and
one per reference library, each logging its best rate per square size under the one key
`series/gflops` (`series/gbps` for copies) with the size as the step, so that MLflow draws
every kernel and the vendor as lines of one chart; shapes that are not square go under
`series/gflops_not_square`, never on the square sizes' line.

How a sweep ends (docs/methodology.md, the exit codes): FINISHED, and the command exits 1 if any
job failed, was impossible, timed out or was interrupted (refused jobs are the spec doing its
job); KILLED by Ctrl-C or SIGTERM, the jobs a launcher's worker process was running when it was
killed marked KILLED too (`end_active_sweep`), the summary saying how many jobs did not run;
FAILED, with the reason, when an error ended it or when its first jobs all failed the same way
before reaching a device (no GPU, no CuPy, no such platform: `_stop_if_hopeless`), which no
other point of the sweep can change. A GPU pool (`gpus=N`) is checked against the GPUs there
are before any job starts.
"""

import atexit
import csv
import io
import logging
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from rich.markup import escape

from runner.errors import RunError
from runner.record import names
from runner.results.records import clock as _clock
from runner.results.records import hygiene as _hygiene
from runner.results.records import is_series as _is_series
from runner.results.records import pct_cell as _pct_cell
from runner.results.records import rate as _rate
from runner.results.records import rate_text as _rate_text
from runner.results.records import reference as _reference
from runner.results.records import size_label as _size
from runner.results.records import size_short as _size_short
from runner.results.records import status as _status
from runner.results.records import tiling as _tiling
from runner.results.records import unit as _unit

PARENT_ENV = "GEMMLAB_SWEEP_PARENT_RUN_ID"
# The parent's store, experiment name and id, one per line: a job recording into the same
# experiment opens its run there without looking the experiment up again.
PARENT_EXPERIMENT_ENV = "GEMMLAB_SWEEP_EXPERIMENT"
STATUSES = ("ok", "cached", "refused", "failed", "impossible", "timeout")
# Statuses that make a finished sweep's command exit 1 ("refused" is the spec doing its job).
UNCLEAN = ("failed", "impossible", "timeout", "killed", "running")
# Launchers whose jobs run in this process or in worker processes it ends with itself: a job of
# theirs still RUNNING once the sweep has ended can be running nowhere (Slurm's may still be).
LOCAL_LAUNCHERS = ("BasicLauncher", "JoblibLauncher")
# The description of such a job's run where it has no params: joblib kills its workers with
# SIGKILL, which nothing holds back, and one can fall between opening the run and its params.
ORPHAN_WITHOUT_PARAMS = ("Its worker process was killed by the launcher after it opened this "
                         "run and before it wrote the run's params; the run's name says which "
                         "job it was, and a resumed sweep measures it.")
STOP_AFTER = 3  # the first jobs that, failing the same way before a device, stop the sweep
log = logging.getLogger(__name__)

_active: Optional["SweepRecorder"] = None  # the sweep this process drives, while it runs
_exit_code = 0  # 1 once a sweep of this process has ended with a job not clean


def end_active_sweep(status: str, reason: str) -> None:
    """End the sweep this process drives, if any, as `status` (KILLED, FAILED) with `reason`:
    the command line calls it when Ctrl-C, SIGTERM or an error stops the sweep."""
    if _active is not None:
        _active._end(status, reason)


def sweep_exit_code() -> int:
    """0, or 1 when a sweep this process drove ended with a job that failed, was impossible,
    timed out or was interrupted."""
    return _exit_code


def in_sweep() -> bool:
    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except ValueError:  # called outside Hydra (tests, scripts)
        return False


def current_parent_run_id() -> Optional[str]:
    """The sweep's parent run for a job of a multirun, None for a single run."""
    return os.environ.get(PARENT_ENV) if in_sweep() else None


def parent_experiment_id(uri: str, experiment: str) -> Optional[str]:
    """The id of the sweep's experiment where a job records into it (same store, same name),
    else None (a single run, or a sweep over tracking.experiment)."""
    known = os.environ.get(PARENT_EXPERIMENT_ENV, "").split("\n") if in_sweep() else []
    return known[2] if len(known) == 3 and known[:2] == [str(uri), str(experiment)] else None


def _sweep_overrides(config: DictConfig) -> list:
    """The overrides the sweeper expands, in its order and as it keys them (Hydra's
    BasicSweeper.split_arguments): the sweeper's params, then the command line's overrides; a
    later override replaces an earlier one only under the same key, prefix included, so
    `shape=square_1024` replaces an experiment's `shape` list and `~shape` does not (each job
    then takes a shape from the list and deletes it: the list's length in identical jobs)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    texts = [f"{key}={value}" for key, value in params.items()]
    texts += _override_texts(config)
    final = {}
    for override in OverridesParser.create().parse_overrides(texts):
        final[override.get_key_element()] = override
    return list(final.values())


def _override_texts(config: DictConfig) -> list:
    """The command line's overrides as typed: `size='${oops}'` stays text (read as a node, an
    interpolation in it would be resolved, and fail before anything is recorded)."""
    return [str(text) for text in
            OmegaConf.to_container(config.hydra.overrides.task, resolve=False)]


def sweep_definition(config: DictConfig) -> dict[str, str]:
    """What is swept, as `key -> values`: the sweeper's params (an experiment's, or the Optuna
    search space) with the command line's overrides on top, as the sweeper combines them."""
    definition = {}
    for override in _sweep_overrides(config):
        if override.is_sweep_override():
            key, _, values = override.input_line.partition("=")
            definition[key.lstrip("+~")] = values
    return definition


def sweep_name(config: DictConfig, definition: dict[str, str]) -> str:
    """The parent run's name: the kernel when one is fixed, then what was swept (the runs table
    shows the first 20 characters), then the backend when one is fixed, e.g. `matmul_14
    shape=square_1024,… · cuda sweep`. The experiment is already the page's own, and
    kernel.params.TS reads as TS."""
    swept = " ".join(f"{k.removeprefix(names.KERNEL_PARAMS_PREFIX)}={v}"
                     for k, v in definition.items())
    kernel = None if "kernel" in definition else OmegaConf.select(config, "kernel.name")
    backend = None if "backend" in definition else OmegaConf.select(config, "backend.name")
    head = " ".join(part for part in (kernel, swept) if part) or "one job"
    return f"{head} · {backend + ' ' if backend else ''}sweep"[:240]


def expected_jobs(config: DictConfig) -> Optional[int]:
    """How many jobs the sweep will launch, when it can be told in advance."""
    trials = OmegaConf.select(config, "hydra.sweeper.n_trials")
    if trials is not None:  # the Optuna sweeper
        return int(trials)
    try:
        total = 1
        for override in _sweep_overrides(config):
            if override.is_sweep_override():
                total *= len(list(override.sweep_string_iterator()))
        return total
    except Exception:  # a sweep the basic parser cannot expand (e.g. an interval)
        return None


def compiles_ahead(config: DictConfig) -> bool:
    """Whether a batch of this sweep can have programs for the compile pool: more than one job
    (or a count not known in advance), and an Optuna sweeper asking for more than one trial at
    a time (a batch's first program is compiled by its worker)."""
    expected = expected_jobs(config)
    at_a_time = OmegaConf.select(config, "hydra.sweeper.n_jobs")
    return (expected is None or expected > 1) and (at_a_time is None or int(at_a_time) > 1)


@dataclass
class SweepSummary:
    """The children of one sweep, counted and ranked."""
    runs: list
    counts: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)  # "refused: …" / "failed: …" -> count
    best: dict = field(default_factory=dict)  # (kernel, size, backend, device) -> run
    ended: Optional[str] = None  # how the sweep ended before its jobs did ("interrupted by …")
    resumable: bool = False  # an interrupted sweep: the same command runs what is left

    @classmethod
    def of(cls, runs: list) -> "SweepSummary":
        summary = cls(runs)
        for run in runs:
            if run.info.status == "RUNNING":
                summary.counts["running"] += 1
                continue
            if run.info.status == "KILLED":  # interrupted (Ctrl-C, SIGTERM): neither result nor failure
                summary.counts["killed"] += 1
                continue
            status = _status(run)
            summary.counts[status] += 1
            if status in ("refused", "failed", "impossible", "timeout"):
                reason = run.data.tags.get(names.FAILURE_REASON, run.info.status)
                summary.reasons[f"{status}: {reason}"] += 1
                continue
            rate = _rate(run)
            if rate is None:
                continue
            cell = (run.data.params.get(names.KERNEL_NAME, "?"), _size(run),
                    run.data.params.get(names.BACKEND_NAME, "?"),
                    run.data.tags.get(names.DEVICE_NAME, "?"))
            if cell not in summary.best or rate > _rate(summary.best[cell]):
                summary.best[cell] = run
        return summary

    def ordered_best(self) -> list:
        """The best runs by kernel, then size (numerically), backend and device."""
        def order(item):
            (kernel, size, backend, device), _ = item
            return kernel, tuple(int(n) for n in size.split("x") if n.isdigit()), backend, device
        return sorted(self.best.items(), key=order)

    @property
    def finished(self) -> int:
        return sum(self.counts[s] for s in STATUSES)

    def best_overall(self):
        ranked = [run for run in self.best.values()]
        return max(ranked, key=_rate) if ranked else None

    def not_run(self, expected: Optional[int]) -> Optional[int]:
        """How many of the expected jobs never started (None where the count is not known)."""
        return None if expected is None else max(expected - len(self.runs), 0)

    def counts_line(self, expected: Optional[int] = None) -> str:
        """The jobs by status; for a sweep that ended early, why first and how many did not run,
        e.g. `interrupted by SIGINT (Ctrl-C): 2/10 jobs: … 2 interrupted; 6 did not run …`."""
        line = self._counts(expected)
        if self.ended is None:
            missing = self.not_run(expected)  # refused before their run opened (a line each)
            return line + (f"; {missing} not recorded, each refused before its run was opened "
                           f"(its line above says why)" if missing else "")
        not_run = self.not_run(expected)
        rest = (f"; {not_run} did not run" if not_run else "") + (
            " (the same command runs what is left, reusing what was measured)"
            if self.resumable and (not_run or self.counts["killed"]) else "")
        return f"{self.ended}: {line}{rest}"

    def _counts(self, expected: Optional[int]) -> str:
        total = f"{self.finished}" + (f"/{expected}" if expected else "")
        return (f"{total} jobs: {self.counts['ok']} measured, {self.counts['cached']} cached "
                f"(measured before), {self.counts['refused']} refused by constraints or limits, "
                f"{self.counts['failed']} failed"
                + (f", {self.counts['impossible']} impossible (faster than the device can be)"
                   if self.counts["impossible"] else "")
                + (f", {self.counts['timeout']} timed out" if self.counts["timeout"] else "")
                + (f", {self.counts['killed']} interrupted" if self.counts["killed"] else "")
                + (f", {self.counts['running']} still running" if self.counts["running"]
                   else ""))

    def clean(self) -> bool:
        """No job failed, was impossible, timed out, was interrupted or is still running."""
        return not any(self.counts[status] for status in UNCLEAN)

    def markdown(self, expected: Optional[int] = None) -> str:
        """The best configuration per kernel and size, and the counts: the parent run's
        description, the first thing its page in the MLflow UI shows."""
        heading = "Best configuration per kernel and size:"
        lines = [heading, "",
                 "| kernel | size | backend | device | tiling | rate | % of reference |",
                 "| --- | --- | --- | --- | --- | ---: | ---: |"]
        for (kernel, size, backend, device), run in self.ordered_best():
            lines.append(f"| {kernel} | {size} | {backend} | {device} | {_tiling(run)} | "
                         f"{_rate(run):,.1f} {_unit(run)} | {_pct_cell(run)} |")
        if not self.best:
            lines = [heading, "", "(no configuration was measured)"]
        lines += ["", self.counts_line(expected) + "."]
        lines += [f"- {count} × {reason}" for reason, count in self.reasons.most_common(20)]
        return "\n".join(lines) + "\n"

    def rows(self) -> list[dict[str, Any]]:
        """One row per child, for the CSV and MLflow table artifacts."""
        rows = []
        for run in sorted(self.runs, key=lambda r: r.info.start_time or 0):
            metrics = run.data.metrics
            rows.append({
                "run_id": run.info.run_id, "status": _status(run),
                "kernel": run.data.params.get(names.KERNEL_NAME, ""),
                "backend": run.data.params.get(names.BACKEND_NAME, ""),
                "device": run.data.tags.get(names.DEVICE_NAME, ""), "size": _size(run),
                "tiling": _tiling(run), "rate": _rate(run), "unit": _unit(run),
                "pct_of_reference": _pct_of_reference(run),
                "reference": getattr(_reference(run), "name", ""),
                "pct_of_vendor": metrics.get(names.PCT_OF_VENDOR),
                "pct_of_vendor_tf32": metrics.get(names.PCT_OF_VENDOR_TF32),
                "time_ms_median": metrics.get(names.TIME_MS_MEDIAN),
                "registers": metrics.get(names.REGISTERS),
                "gpu_sm_clock_mhz": metrics.get(names.GPU_SM_CLOCK_MHZ),
                "hygiene": _hygiene(run),
                "commit": run.data.tags.get(names.GIT_COMMIT, ""),
                "reused_from": run.data.tags.get(names.REUSED_FROM, ""),
                "reason": run.data.tags.get(names.FAILURE_REASON, ""),
            })
        return rows


def _pct_of_reference(run) -> Optional[float]:
    found = _reference(run)
    return None if found is None else found.pct


def _square(run) -> bool:
    """M = N = K (M = N for a copy): a size on the series' line."""
    params = run.data.params
    dims = (names.M, names.N, names.K) if _unit(run) == "GFLOPS" else (names.M, names.N)
    return len({params.get(d) for d in dims}) == 1


def series_point(run) -> tuple[str, int]:
    """The series key and step of a run's rate: `series/gflops` (`series/gbps`) with the size
    as the step for a square size; `series/gflops_not_square` with the rounded cube root of
    M·N·K (square root of M·N) for any other shape, so that no line joins the two."""
    params = run.data.params
    gemm = _unit(run) == "GFLOPS"
    key = names.SERIES_RATE_GFLOPS if gemm else names.SERIES_RATE_GBPS
    if _square(run):
        return key, int(params.get(names.M) or 0)
    dims = [int(params.get(d) or 0) for d in ((names.M, names.N, names.K) if gemm
                                               else (names.M, names.N))]
    product = 1
    for d in dims:
        product *= d
    return key + names.SERIES_ODD_SUFFIX, round(product ** (1 / len(dims)))


@dataclass
class Series:
    """One line of the sweep's chart: a kernel on a backend, or a reference library."""
    name: str  # the run's name, its legend in MLflow's charts
    of: str  # the gemmlab.series.of tag: `kernel matmul_9 on cuda`, `cuBLAS TF32 on cuda`
    # Whose line, as tags (gemmlab.kernel, gemmlab.backend, perf.reference), never the jobs'
    # params: a reader that picks runs by kernel.name must not find a line among them.
    tags: dict
    points: dict = field(default_factory=dict)  # (key, step) -> value
    shapes: dict = field(default_factory=dict)  # (key, step) -> the size label

    def metrics(self, now: int) -> list:
        from mlflow.entities import Metric

        return [Metric(key, value, now, step)
                for (key, step), value in sorted(self.points.items())]


def sweep_series(summary: "SweepSummary") -> list[Series]:
    """The best rate per kernel (and backend) and size, and the reference libraries' rates
    (their median over the jobs that measured them, noisy baselines left out), as series."""
    kernels: dict = {}
    for (kernel, _, backend, _), run in summary.best.items():
        rate = _rate(run)
        if rate is None:
            continue
        line = kernels.setdefault((kernel, backend), Series(
            f"{kernel} · {backend} · rate by size", f"kernel {kernel} on {backend}",
            {names.KERNEL: kernel, names.BACKEND: backend}))
        point = series_point(run)
        line.points[point] = max(rate, line.points.get(point, rate))
        line.shapes[point] = _size(run)
    libraries: dict = {}
    for run in summary.runs:
        if _status(run) not in ("ok", "cached"):
            continue
        found = _reference(run)
        if found is None or found.rate is None or found.pct is None:
            continue
        backend = run.data.params.get(names.BACKEND_NAME, "?")
        point = series_point(run)
        libraries.setdefault((found.name, backend), {}).setdefault(point, []).append(
            (found.rate, _size(run)))
    lines = [kernels[key] for key in sorted(kernels)]
    for (library, backend), points in sorted(libraries.items()):
        line = Series(f"{library} · {backend} · rate by size", f"{library} on {backend}",
                      {names.BACKEND: backend, names.REFERENCE: library})
        for point, rates in points.items():
            ordered = sorted(rate for rate, _ in rates)
            line.points[point] = ordered[len(ordered) // 2]
            line.shapes[point] = rates[0][1]
        lines.append(line)
    return lines


def series_description(line: Series, sweep: str) -> str:
    """A series run's description: what its chart's x axis is (MLflow labels it Step)."""
    keys = sorted({key for key, _ in line.points})
    square = [key for key in keys if not key.endswith(names.SERIES_ODD_SUFFIX)]
    what = ("the best rate at each size" if names.KERNEL in line.tags else
            "the library's rate at each size (the median over the jobs that measured it)")
    text = [f"**{line.of}**: {what} in the sweep **{sweep}** (its parent run), one line of "
            "its chart; not a job of its own."]
    if square:
        text.append(f"`{square[0]}`: x (MLflow's *Step*) is the size, M = N = K "
                    "(M = N for a copy).")
    odd = [point for point in sorted(line.points) if point[0].endswith(names.SERIES_ODD_SUFFIX)]
    if odd:
        text.append(f"`{odd[0][0]}`: shapes that are not square, apart from the line; x is the "
                    "geometric mean of the dimensions, rounded: " + ", ".join(
                        f"{line.shapes[point]} at {point[1]}" for point in odd) + ".")
    return "  \n".join(text) + "\n"


def bookkeeping_of(summary: "SweepSummary", wall_s: float) -> dict:
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


def _tag_value(value) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def size_by_kernel(summary: "SweepSummary") -> list[str]:
    """The best rate per size (rows) and kernel (columns; with the backend where several
    were swept), each with its % of the vendor library of the step's own precision; the fastest
    at each size in bold with ★; a † where that job was not clean while timed (its GPU or host,
    or its samples' noise)."""
    several_backends = len({backend for _, _, backend, _ in summary.best}) > 1
    cells: dict = {}
    for (kernel, size, backend, _), run in summary.best.items():
        if _rate(run) is None:
            continue
        column = f"{kernel} {backend}" if several_backends else kernel
        held = cells.get((size, column))
        if held is None or _rate(run) > _rate(held):
            cells[(size, column)] = run
    if not cells:
        return []

    def size_order(size):  # square sizes first, then the other shapes
        dims = tuple(int(n) for n in size.split("x") if n.isdigit())
        return (len(set(dims)) > 1, dims, size)

    def step_order(column):  # matmul_9 before matmul_12
        family, _, step = column.split()[0].rpartition("_")
        return (family, int(step) if step.isdigit() else 0, column)

    columns = sorted({column for _, column in cells}, key=step_order)
    sizes = sorted({size for size, _ in cells}, key=size_order)
    units = {_unit(run) for run in cells.values()}
    one_unit = len(units) == 1
    unit_text = next(iter(units)) if one_unit else "GFLOPS, or GB/s for copies"
    lines = [f"**Best rate per size** ({unit_text}) and its % of the vendor library of the "
             "step's own precision (cuBLAS TF32 for a TF32 step, cuBLAS SGEMM for FP32 and "
             "3xTF32); ★ the fastest at the size; † not clean while timed: the GPU or host "
             "busy or held back, or the samples too noisy (below).", "",
             "| size | " + " | ".join(columns) + " |",
             "| --- |" + " ---: |" * len(columns)]
    for size in sizes:
        runs = {column: cells.get((size, column)) for column in columns}
        fastest: dict = {}
        for run in runs.values():  # per unit: a copy and an SGEMM never compete
            if run is not None and (_unit(run) not in fastest
                                    or _rate(run) > _rate(fastest[_unit(run)])):
                fastest[_unit(run)] = run
        row = []
        for column in columns:
            run = runs[column]
            if run is None:
                row.append("—")
                continue
            pct = _pct_cell(run, 0)
            text = _rate_text(_rate(run), "" if one_unit else _unit(run)).strip()
            text += "" if pct == "—" else f" ({pct})"
            text += " †" if _hygiene(run) else ""
            row.append(f"**★ {text}**" if fastest.get(_unit(run)) is run else text)
        label = size if len(set(size.split("x"))) > 1 else _size_short(next(
            r for r in runs.values() if r is not None))
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    return lines + [""]


def unclean_jobs(summary: "SweepSummary", limit: int = 20) -> list[str]:
    """Each measured job not clean while timed (its GPU or host, or its samples' noise): what,
    and its clock."""
    unclean = [run for run in summary.runs if _status(run) in ("ok", "cached") and _hygiene(run)]
    if not unclean:
        return []
    unclean.sort(key=lambda r: (r.data.params.get(names.KERNEL_NAME, ""), _size(r)))
    lines = [f"† Not clean while timed ({len(unclean)} of the measured jobs; tags "
             f"`{names.GPU_HYGIENE}`, `{names.HOST_HYGIENE}`, `{names.GPU_CLOCK_REASONS}`, "
             f"metric `{names.TIME_NOISE}`):", ""]
    for run in unclean[:limit]:
        clock = _clock(run)
        what = " ".join(filter(None, [run.data.params.get(names.KERNEL_NAME, "?"),
                                      _size_short(run), _tiling(run)]))
        lines.append(f"- {what}: {_hygiene(run, reasons=True)}"
                     + (f", SM clock {clock}" if clock else ""))
    if len(unclean) > limit:
        lines.append(f"- … {len(unclean) - limit} more in `sweep_summary.csv`")
    return lines + [""]


def description(name: str, summary: "SweepSummary", expected: Optional[int],
                devices: list[str], series: bool = True) -> str:
    """The parent's description, the first thing its page shows: the size × kernel table of
    the best rate and its headline %, the jobs not timed clean, then what the sweep was, where
    its report and chart are, and the best configuration per kernel and size with the counts."""
    where = f" on {', '.join(devices)}" if devices else ""
    keys = sorted({series_point(run)[0] for run in summary.best.values()
                   if _rate(run) is not None})
    charts = (f" Chart: the series runs under this one (`{'`, `'.join(keys)}`), a line per "
              "kernel and one per vendor library, x (*Step*) the size M = N = K."
              if keys and series else "")
    lead = size_by_kernel(summary) + unclean_jobs(summary)
    about = (f"**{name}**: {summary.finished} jobs{where}.  \n"
             f"Report: artifacts `report/sweep.md` and its plots in `report/`; the rows of every "
             f"job in `sweep_summary.csv`.{charts}\n\n")
    return ("\n".join(lead) + "\n" if lead else "") + about + summary.markdown(expected)


def sweep_children(client, experiment_id: str, parent_run_id: str) -> list:
    """The sweep's jobs (its series runs, lines of its chart, left out)."""
    runs = client.search_runs([experiment_id],
                              filter_string=f"tags.`{names.PARENT_RUN_ID}` = '{parent_run_id}'",
                              max_results=50000)
    return [run for run in runs if not _is_series(run)]


def _progress_line(summary: SweepSummary) -> str:
    running = [r for r in summary.runs if r.info.status == "RUNNING"]
    now = escape(", ".join(r.info.run_name for r in running[:2]) or "—")
    best = summary.best_overall()
    best_text = "—" if best is None else (
        f"{_rate(best):,.1f} {_unit(best)} {best.data.params.get(names.KERNEL_NAME)} "
        f"{_size(best)} "
        f"{_tiling(best)}".strip())
    skipped = f" · {summary.counts['cached']} cached" if summary.counts["cached"] else ""
    return f"sweep · now: {now} · best: {escape(best_text)}{skipped}"


class _ProgressMonitor:
    """A bar over the sweep's jobs, fed by polling the children MLflow has recorded."""

    def __init__(self, uri: str, experiment_id: str, parent_run_id: str,
                 expected: Optional[int]):
        from mlflow.tracking import MlflowClient
        from rich.progress import Progress

        from runner.terminal import progress as progress_bars

        self._client = MlflowClient(uri)
        self._where = (experiment_id, parent_run_id)
        self._progress = Progress(*progress_bars.columns(), transient=False)
        self._task = self._progress.add_task("sweep", total=expected)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self.enabled = self._progress.console.is_terminal
        if self.enabled:
            self._progress.start()
            progress_bars.share(self._progress)  # runs' timing bars join this display
            self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(1.0):
            try:
                summary = SweepSummary.of(sweep_children(self._client, *self._where))
            except Exception:  # a busy store: try again at the next tick
                continue
            self._progress.update(self._task, completed=summary.finished,
                                  description=_progress_line(summary))

    def close(self) -> None:
        from runner.terminal import progress as progress_bars

        if self.enabled:
            self._stop.set()
            self._thread.join(timeout=5)
            progress_bars.share(None)
            self._progress.stop()


def print_sweep_summary(summary: SweepSummary, expected: Optional[int], parent_name: str,
                        parent_run_id: str, uri: str, overhead: Optional[float] = None,
                        phases: str = "") -> None:
    from rich.table import Table

    from runner.terminal.summary import console, log_console

    table = Table(title=f"{escape(parent_name)}: best configuration per kernel and size",
                  title_justify="left")
    any_cached = any(_status(run) == "cached" for run in summary.best.values())
    columns = [("kernel", "left"), ("size", "left"), ("backend", "left"), ("device", "left"),
               ("tiling", "left"), ("rate", "right"), ("% of reference", "right")]
    # With any cached row, a column says which rows this sweep measured and which it copied.
    for column, justify in columns + ([("measured", "left")] if any_cached else []):
        table.add_column(column, justify=justify, no_wrap=column != "tiling")
    for (kernel, size, backend, device), run in summary.ordered_best():
        row = [kernel, size, backend, device, _tiling(run), f"{_rate(run):,.1f} {_unit(run)}",
               _pct_cell(run)]
        measured = [("before (cached)" if _status(run) == "cached" else "now")] if any_cached \
            else []
        table.add_row(*map(escape, row), *measured)
    if summary.best:  # in a log or a pipe, as wide as the table needs rather than 80 columns
        (console if console.is_terminal else log_console).print(table)
    # Escaped: reasons hold brackets (`pip install 'gemmlab[cuda]'`), never markup.
    console.print(escape(summary.counts_line(expected)) + (
        f"; {overhead:.2f} s per job beyond the kernels' own work"
        if overhead is not None and summary.ended is None else ""))
    if phases and summary.ended is None:
        console.print(f"  {escape(phases)}")
    for reason, count in summary.reasons.most_common(10):
        console.print(f"  {count} × {escape(reason)}")
    if len(summary.reasons) > 10:
        console.print(f"  … {len(summary.reasons) - 10} more reasons in failures.md")
    console.print(f"  recorded: MLflow parent run {parent_run_id} in {uri}")


class SweepRecorder(Callback):
    """Hydra callback: the sweep's parent run, its progress bar and its summary."""

    def __init__(self) -> None:
        self._parent_run_id: Optional[str] = None
        self._jobs_ended = 0

    def __getstate__(self) -> dict:
        # Launchers pickle Hydra's context, callbacks included, to their workers: a worker's
        # copy holds nothing (the parent is driven from the sweep's own process only).
        return {"_parent_run_id": None}

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from runner.record.store import holding_signals

        # A signal meanwhile is raised once the parent's end is registered: that closes it.
        with holding_signals(config.tracking.uri):
            self._start(config)

    def _start(self, config: DictConfig) -> None:
        tracking = config.tracking
        launcher = OmegaConf.select(config, "hydra.launcher._target_") or "?"
        pool = OmegaConf.select(config, "gpus")
        if isinstance(pool, int) and pool > 0:  # before anything is recorded or launched
            from runner.sweep.gpu_pool import pool_refusal

            refusal = pool_refusal(pool, config.backend)
            if refusal:
                from runner.terminal.summary import print_failure

                print_failure(refusal, None)
                sys.exit(1)
        if launcher.endswith(".GemmlabLauncher"):  # its jobs run in this process's worker
            from runner.job.supervisor import warm

            warm(config)  # the device opened beside MLflow's import and the jobs' composing
            if compiles_ahead(config):
                from runner.sweep.precompile import prestart

                prestart(config.backend.name)  # and the compile pool's first processes started
        from mlflow.tracking import MlflowClient

        from runner.record.store import ensure_store
        from runner.record.tracking import (
            _quiet_mlflow,
            experiment_for,
            provenance_tags,
        )

        _quiet_mlflow()  # MLflow is imported: no INFO lines for the store's creation
        try:
            ensure_store(tracking.uri)  # before any job: parallel jobs then find it ready
        except RunError as error:  # Hydra would take it for a warning and run every job
            from runner.terminal.summary import print_failure

            print_failure(f"cannot record in MLflow at tracking.uri={tracking.uri}: {error}", None)
            sys.exit(1)
        client = MlflowClient(tracking.uri)
        experiment_id = experiment_for(tracking.uri, tracking.experiment)
        definition = sweep_definition(config)
        self._definition = definition
        self._expected = expected_jobs(config)
        self._name = sweep_name(config, definition)
        sweeper = OmegaConf.select(config, "hydra.sweeper._target_") or "?"
        tags = {**provenance_tags(), names.SWEEP: "true",
                names.SWEEP_OVERRIDES: " ".join(_override_texts(config)),
                names.SWEEP_SWEEPER: sweeper.rsplit(".", 1)[-1],
                names.SWEEP_LAUNCHER: launcher.rsplit(".", 1)[-1],
                names.SWEEP_DIR: str(OmegaConf.select(config, "hydra.sweep.dir"))}
        run = client.create_run(experiment_id, run_name=self._name, tags=tags)
        self._client, self._uri = client, tracking.uri
        self._launcher = tags[names.SWEEP_LAUNCHER]
        self._experiment_id, self._parent_run_id = experiment_id, run.info.run_id
        self._jobs_ended = 0
        global _active
        _active = self
        for key, values in definition.items():
            client.log_param(run.info.run_id, f"{names.SWEEP_PARAM_PREFIX}{key}"[:250],
                             values[:6000])
        if self._expected is not None:
            client.log_param(run.info.run_id, names.SWEEP_EXPECTED_JOBS, self._expected)
        os.environ[PARENT_ENV] = run.info.run_id
        os.environ[PARENT_EXPERIMENT_ENV] = "\n".join(
            (str(tracking.uri), str(tracking.experiment), experiment_id))
        self._started = time.monotonic()
        self._monitor = _ProgressMonitor(tracking.uri, experiment_id, run.info.run_id,
                                         self._expected)
        # An interrupted sweep still closes its parent (the command line says why first,
        # through end_active_sweep; this is for a process that exits any other way).
        atexit.register(self._end, "KILLED", "the sweep's process exited before its jobs ended")

    def on_job_end(self, config: DictConfig, job_return: Any = None, **kwargs: Any) -> None:
        """In the sweep's own process (the basic launcher, the Optuna sweeper's): stop the
        sweep when its first jobs all failed the same way before reaching a device."""
        if self._parent_run_id is None:  # a launcher's worker's copy, or the sweep has ended
            return
        self._jobs_ended += 1
        if STOP_AFTER <= self._jobs_ended <= 2 * STOP_AFTER:
            self._stop_if_hopeless()

    def _stop_if_hopeless(self) -> None:
        """End the sweep FAILED, one line, exit 1, when its first STOP_AFTER jobs (and none
        other) all failed with the same reason before the backend had opened a device (the
        worker started the job, and no measurement key was recorded: that needs the device):
        no GPU, no CuPy, no such OpenCL platform or device. With the backend fixed for the whole
        sweep, no other point of it can change that; the rest would fail one by one."""
        if any(key.split(".")[0] in ("backend", "gpus") for key in self._definition):
            return
        from runner.record.store import holding_signals

        from runner.record.tracking import flush_records

        with holding_signals(self._uri):
            flush_records()  # the jobs' record ends written beside later jobs
            runs = sweep_children(self._client, self._experiment_id, self._parent_run_id)
        if len(runs) < STOP_AFTER or (self._expected is not None
                                      and len(runs) >= self._expected):
            return  # too few to tell, or nothing left to spare
        reasons = {run.data.tags.get(names.FAILURE_REASON) for run in runs}
        before_a_device = all(
            _status(run) == "failed" and names.WORKER_PID in run.data.tags
            and names.MEASUREMENT_KEY not in run.data.tags for run in runs)
        if len(reasons) != 1 or not before_a_device or None in reasons:
            self._jobs_ended = 2 * STOP_AFTER + 1  # decided: no more looking
            return
        why = (f"stopped the sweep after its first {len(runs)} jobs: each failed before reaching "
               f"a device, the same way, which no other point of this sweep can change: "
               f"{reasons.pop()}")
        self._end("FAILED", why)
        from runner.terminal.summary import print_failure

        print_failure(why, None)
        sys.exit(1)  # not an Exception: Hydra's callbacks would take that for a warning

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._end("FINISHED")

    def _end(self, status: str, reason: Optional[str] = None) -> None:
        """Close the parent as `status` (FINISHED, KILLED, FAILED); `reason` says why a sweep
        ended before its jobs did."""
        precompile = sys.modules.get("runner.sweep.precompile")
        if precompile is not None:  # a compile pool started with the sweep and never used
            precompile.stop_prestarted()
        if self._parent_run_id is None:
            return
        from runner.record.store import holding_signals

        # Held back while the summary and the status are written: a Ctrl-C meanwhile, or one
        # that lands inside a store call of the sweep's own end, must not leave it RUNNING.
        with holding_signals(self._uri):
            self._close(status, reason)

    def _end_orphans(self, runs: list, reason: str) -> bool:
        """Mark KILLED, with `reason`, the jobs still RUNNING when the sweep ended early: with
        joblib, a worker process killed by the launcher (joblib kills its workers when the
        sweep is interrupted) never wrote its run's end. Only for launchers whose jobs cannot
        outlive this process; returns whether any was marked."""
        from mlflow.entities import RunTag

        if self._launcher not in LOCAL_LAUNCHERS:
            return False
        orphans = [run for run in runs if run.info.status == "RUNNING"]
        for run in orphans:
            tags = [RunTag(names.STATUS, "killed"), RunTag(names.FAILURE_REASON, reason)]
            if not run.data.params:  # the kill (SIGKILL: no shield) fell between two writes
                tags.append(RunTag(names.NOTE, ORPHAN_WITHOUT_PARAMS))
            self._client.log_batch(run.info.run_id, tags=tags)
            self._client.set_terminated(run.info.run_id, "KILLED")
        return bool(orphans)

    def _close(self, status: str, reason: Optional[str] = None) -> None:
        global _active, _exit_code
        parent, self._parent_run_id = self._parent_run_id, None
        if _active is self:
            _active = None
        self._monitor.close()
        os.environ.pop(PARENT_ENV, None)
        os.environ.pop(PARENT_EXPERIMENT_ENV, None)
        from runner.record.tracking import flush_records

        try:  # the last jobs' record ends (written beside later jobs), first
            flush_records()
        except Exception as error:  # that job stays RUNNING; the sweep still ends and says so
            from runner.terminal.summary import print_failure

            print_failure(f"a job's record could not be ended: {type(error).__name__}: "
                          f"{str(error).strip()[:300]}", None)
        runs = sweep_children(self._client, self._experiment_id, parent)
        if status != "FINISHED" and self._end_orphans(runs, reason or status.lower()):
            runs = sweep_children(self._client, self._experiment_id, parent)
        summary = SweepSummary.of(runs)
        if status == "KILLED":
            summary.ended, summary.resumable = reason or "interrupted", True
        elif status != "FINISHED":  # the line that ended it follows the summary
            summary.ended = "ended by the error below"
        elif not summary.clean() or summary.not_run(self._expected):
            _exit_code = 1
        if not summary.runs:  # no job started (a typo in the sweep): leave no empty parent
            self._forget(parent)
            if status == "FINISHED":  # else the error that stopped the sweep was its one line
                from runner.terminal.summary import print_failure

                print_failure("the sweep launched no job; nothing was recorded", None)
            return
        metrics = {}
        try:
            metrics = self._log_summary(parent, summary, series=status == "FINISHED")
            if reason:
                self._client.set_tag(parent, names.FAILURE_REASON, reason[:5000])
        finally:
            self._client.set_terminated(parent, status)
        print_sweep_summary(summary, self._expected, self._name, parent, self._uri,
                            metrics.get("overhead_s_per_job"), phases_line(metrics))

    def _forget(self, parent: str) -> None:
        """Delete the parent run for good (a soft delete would still list it under Deleted)."""
        self._client.delete_run(parent)
        store = getattr(getattr(self._client, "_tracking_client", None), "store", None)
        if hasattr(store, "_hard_delete_run"):  # a database store: what `mlflow gc` does
            try:
                store._hard_delete_run(parent)
            except Exception as error:  # the soft delete stands; the run is hidden
                log.debug("could not delete the empty parent run %s: %s", parent, error)

    def _log_summary(self, parent: str, summary: SweepSummary, series: bool = True) -> dict:
        """Bookkeeping as tags, the description, the summary table, the report and the reasons
        on the parent, and (with `series`: a sweep that finished, not one interrupted or ended
        by an error, which a resume or a fix runs again) the series runs under it; returns the
        bookkeeping."""
        from mlflow.entities import RunTag

        client = self._client
        bookkeeping = bookkeeping_of(summary, time.monotonic() - self._started)
        client.log_batch(parent, tags=[RunTag(f"{names.SWEEP_PREFIX}{key}", _tag_value(value))
                                       for key, value in bookkeeping.items()])
        devices = sorted({r.data.tags[names.DEVICE_NAME] for r in summary.runs
                          if names.DEVICE_NAME in r.data.tags})
        client.set_tag(parent, names.DEVICE_NAME, ", ".join(devices) or "—")
        best = summary.best_overall()
        if best is not None:
            described = (f"{best.data.params.get(names.KERNEL_NAME)} {_size(best)} "
                         f"{_tiling(best)}: {_rate(best):,.1f} {_unit(best)}")
            client.set_tag(parent, names.SWEEP_BEST, described)
        client.set_tag(parent, names.NOTE,
                       description(self._name, summary, self._expected, devices, series))
        rows = summary.rows()
        if rows:
            buffer = io.StringIO()
            writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
            client.log_text(parent, buffer.getvalue(), "sweep_summary.csv")
            client.log_table(parent, {k: [row[k] for row in rows] for k in rows[0]},
                             "sweep_summary.json")
        self._log_report(parent, summary)
        if series:
            self._log_series(parent, summary)
        lines = [f"# {self._name}", "", summary.counts_line(self._expected), ""]
        lines += [f"- {count} × {reason}" for reason, count in summary.reasons.most_common()]
        client.log_text(parent, "\n".join(lines) + "\n", "failures.md")
        table = phases_table(bookkeeping)
        if table:
            client.log_text(parent, table, "phases.md")
        return bookkeeping

    def _log_series(self, parent: str, summary: SweepSummary) -> None:
        """The series runs under the parent: a line per kernel (and backend) and per reference
        library, the rate against size under one key each, for MLflow's one chart."""
        client, now = self._client, int(time.time() * 1000)
        for line in sweep_series(summary):
            tags = {names.PARENT_RUN_ID: parent, names.SERIES: "true", names.SERIES_OF: line.of,
                    names.STATUS: names.SERIES_STATUS,
                    names.NOTE: series_description(line, self._name), **line.tags}
            run = client.create_run(self._experiment_id, run_name=line.name, tags=tags)
            client.log_batch(run.info.run_id, metrics=line.metrics(now))
            client.set_terminated(run.info.run_id, "FINISHED")

    def _log_report(self, parent: str, summary: SweepSummary) -> None:
        """The report's page and plots of this sweep (best configuration per step and size)."""
        from runner.results.report import build_report

        with tempfile.TemporaryDirectory() as folder:
            written = build_report(summary.runs, self._name, Path(folder), self._uri,
                                   name="sweep", best=True,
                                   command="python -m runner " + " ".join(sys.argv[1:]))
            for path in written:
                self._client.log_artifact(parent, str(path), "report")
