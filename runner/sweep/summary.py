"""A sweep's children counted and ranked (`SweepSummary`), and what is shown of them: the parent
run's description (a size × kernel table of the best rate and its % of the vendor library of
each step's own precision, the winner per size marked, the jobs timed on a GPU or host that was
not clean listed with their clock, then what the sweep was and where its report is), and the
table printed at the sweep's end. `sweep_children` finds the children in the store."""

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

from rich.markup import escape

from runner.record import names
from runner.results.records import BEST_RULE
from runner.results.records import best_runs as _best_runs
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
from runner.sweep.series import series_point

STATUSES = ("ok", "cached", "refused", "failed", "impossible", "timeout")
# Statuses that make a finished sweep's command exit 1 ("refused" is the spec doing its job).
UNCLEAN = ("failed", "impossible", "timeout", "killed", "running")


@dataclass
class SweepSummary:
    """The children of one sweep, counted and ranked."""
    runs: list
    counts: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)  # "refused: …" / "failed: …" -> count
    # (kernel, size, backend, device) -> its fastest measured run (records.best_runs)
    best: dict = field(default_factory=dict)
    ended: Optional[str] = None  # how the sweep ended before its jobs did ("interrupted by …")
    resumable: bool = False  # an interrupted sweep: the same command runs what is left
    # Why the jobs without a run never ran, where the launcher knows (Slurm cancelled them).
    not_run_why: Optional[str] = None

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
        summary.best = _best_runs(runs)
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
            if missing and self.not_run_why:
                return line + f"; {missing} did not run ({self.not_run_why})"
            return line + (f"; {missing} not recorded, each refused before its run was opened "
                           f"(its line above says why)" if missing else "")
        not_run = self.not_run(expected)
        why = f" ({self.not_run_why})" if self.not_run_why else ""
        rest = (f"; {not_run} did not run{why}" if not_run else "") + (
            " (the same command runs what is left, reusing what was measured)"
            if self.resumable and (not_run or self.counts["killed"]) else "")
        return f"{self.ended}: {line}{rest}"

    def _counts(self, expected: Optional[int]) -> str:
        total = f"{self.finished}" + (f"/{expected}" if expected else "")
        again = sum(1 for run in self.runs if _status(run) == "ok"
                    and run.data.tags.get(names.NOT_REUSED))
        unclean = sum(1 for run in self.runs if _status(run) == "cached" and _hygiene(run))
        return (f"{total} jobs: {self.counts['ok']} measured"
                + (f" ({again} again: the earlier run not clean)" if again else "")
                + f", {self.counts['cached']} cached (measured before"
                + (f"; {unclean} not clean, reused as asked" if unclean else "")
                + f"), {self.counts['refused']} refused by constraints or limits, "
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
        lines = [heading, f"({BEST_RULE}, with its tiling)", "",
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
                "hygiene": _hygiene(run, reasons=True),
                "commit": run.data.tags.get(names.GIT_COMMIT, ""),
                "reused_from": run.data.tags.get(names.REUSED_FROM, ""),
                "reused_unclean": run.data.tags.get(names.REUSED_UNCLEAN, ""),
                "not_reused": run.data.tags.get(names.NOT_REUSED, ""),
                "reason": run.data.tags.get(names.FAILURE_REASON, ""),
            })
        return rows


def _pct_of_reference(run) -> Optional[float]:
    found = _reference(run)
    return None if found is None else found.pct


def size_by_kernel(summary: SweepSummary) -> list[str]:
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
    lines = [f"**Best rate per size** ({unit_text}), the fastest measured job (ok or cached) "
             "by its median rate, and its % of the vendor library of the step's own precision "
             "(cuBLAS TF32 for a TF32 step, cuBLAS SGEMM for FP32 and 3xTF32); ★ the fastest "
             "at the size; † not clean while timed: the GPU or host busy or held back, or the "
             "samples too noisy (below).", "",
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


def unclean_jobs(summary: SweepSummary, limit: int = 20) -> list[str]:
    """Each measured job not clean while timed (its GPU or host, or its samples' noise): what,
    and its clock."""
    unclean = [run for run in summary.runs if _status(run) in ("ok", "cached") and _hygiene(run)]
    if not unclean:
        return []

    def cached(run) -> str:  # a copy says whose caveats it carries, and that it was asked for
        if _status(run) != "cached":
            return ""
        asked = ", reused as asked (reuse_unclean=true)" if run.data.tags.get(
            names.REUSED_UNCLEAN) else ""
        return f" (cached from `{run.data.tags.get(names.REUSED_FROM, '?')[:8]}`{asked})"

    unclean.sort(key=lambda r: (r.data.params.get(names.KERNEL_NAME, ""), _size(r)))
    lines = [f"† Not clean while timed ({len(unclean)} of the measured jobs; tags "
             f"`{names.GPU_HYGIENE}`, `{names.HOST_HYGIENE}`, `{names.GPU_CLOCK_REASONS}`, "
             f"metric `{names.TIME_NOISE}`):", ""]
    for run in unclean[:limit]:
        clock = _clock(run)
        what = " ".join(filter(None, [run.data.params.get(names.KERNEL_NAME, "?"),
                                      _size_short(run), _tiling(run)]))
        lines.append(f"- {what}: {_hygiene(run, reasons=True)}"
                     + (f", SM clock {clock}" if clock else "") + cached(run))
    if len(unclean) > limit:
        lines.append(f"- … {len(unclean) - limit} more in `sweep_summary.csv`")
    return lines + [""]


def description(name: str, summary: SweepSummary, expected: Optional[int],
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


def print_sweep_summary(summary: SweepSummary, expected: Optional[int], parent_name: str,
                        parent_run_id: str, uri: str, overhead: Optional[float] = None,
                        phases: str = "") -> None:
    from rich.table import Table

    from runner.terminal.summary import console, log_console

    table = Table(title=f"{escape(parent_name)}: best configuration per kernel and size",
                  title_justify="left", caption=f"best: {BEST_RULE}", caption_justify="left")
    any_cached = any(_status(run) == "cached" for run in summary.best.values())
    columns = [("kernel", "left"), ("size", "left"), ("backend", "left"), ("device", "left"),
               ("tiling", "left"), ("rate", "right"), ("% of reference", "right")]
    # With any cached row, a column says which rows this sweep measured and which it copied.
    for column, justify in columns + ([("measured", "left")] if any_cached else []):
        table.add_column(column, justify=justify, no_wrap=column != "tiling")
    daggers = False
    for (kernel, size, backend, device), run in summary.ordered_best():
        dagger = " †" if _hygiene(run) else ""
        daggers = daggers or bool(dagger)
        row = [kernel, size, backend, device, _tiling(run),
               f"{_rate(run):,.1f} {_unit(run)}{dagger}", _pct_cell(run)]
        measured = [("now" if _status(run) != "cached" else "before (cached, reused as asked)"
                     if run.data.tags.get(names.REUSED_UNCLEAN) else "before (cached)")] \
            if any_cached else []
        table.add_row(*map(escape, row), *measured)
    if summary.best:  # in a log or a pipe, as wide as the table needs rather than 80 columns
        (console if console.is_terminal else log_console).print(table)
    if daggers:
        console.print("† not clean while timed (its host or GPU busy or held back, or its "
                      "samples noisy; a cached row: its source's): the jobs' lines say why")
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
