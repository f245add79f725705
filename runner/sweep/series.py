"""A sweep's series runs: under its parent, beside the jobs (tag `gemmlab.series`, status
`series`: never a job), one per kernel and backend and one per reference library, each logging
its best rate per square size under the one key `series/gflops` (`series/gbps` for copies) with
the size as the step, so that MLflow draws every kernel and the vendor as lines of one chart;
shapes that are not square go under `series/gflops_not_square`, never on the square sizes'
line."""

import time
from dataclasses import dataclass, field

from runner.record import names
from runner.results.records import rate as _rate
from runner.results.records import reference as _reference
from runner.results.records import size_label as _size
from runner.results.records import status as _status
from runner.results.records import unit as _unit


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


def sweep_series(summary) -> list[Series]:
    """The best rate per kernel (and backend) and size, and the reference libraries' rates
    (their median over the jobs that measured them, noisy baselines left out), as series, from
    a SweepSummary (runner/sweep/summary.py, which imports this module: not the other way)."""
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


def log_series(client, experiment_id: str, parent: str, summary, sweep: str) -> None:
    """The series runs under the parent: a line per kernel (and backend) and per reference
    library, the rate against size under one key each, for MLflow's one chart."""
    now = int(time.time() * 1000)
    for line in sweep_series(summary):
        tags = {names.PARENT_RUN_ID: parent, names.SERIES: "true", names.SERIES_OF: line.of,
                names.STATUS: names.SERIES_STATUS,
                names.NOTE: series_description(line, sweep), **line.tags}
        run = client.create_run(experiment_id, run_name=line.name, tags=tags)
        client.log_batch(run.info.run_id, metrics=line.metrics(now))
        client.set_terminated(run.info.run_id, "FINISHED")
