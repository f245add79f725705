"""A sweep's view in the MLflow UI: the runs table's columns and sort, and the chart view's first
section, written as an MLflow shared view state that `gemmlab ui` opens by its URL.

    view_state(parent, children, lines) -> dict  the state: search, sort, columns, charts
    write_view(client, parent, children) -> the share keys of its table and its chart view
    line_colors(children) -> a colour per series run (tag mlflow.runColor), set by write_view
    view_url(base, experiment_id, key, charts=False) -> the URL that opens it

MLflow 3 (3.15 and later) keeps a shared view state in an experiment tag
`mlflow.sharedViewState.<key>` and applies it when the experiment page is opened with
`?viewStateShareKey=<key>`. The tag's value is a saved view's envelope, JSON
`{"name", "createdAt", "updatedAt", "state"}`, whose `state` is a JSON string (or `deflate;`
and base64 of its zlib stream) of one flat object: the search facets (`searchFilter`,
`orderByKey`, `orderByAsc`, …) and the table and chart state (`selectedColumns`, `columnOrder`,
`columnWidths`, `compareRunCharts`, `compareRunSections`, …). Columns and sort keys are
`params.\\`name\\``, `metrics.\\`name\\``, `tags.\\`name\\``. None of this is a documented API: it is
what the UI's own JavaScript reads (mlflow/server/js/build/static/js), so it is written only
where the installed MLflow's major version is MLFLOW_MAJOR, and tests/test_ui.py reads the
installed bundle for every key used here and fails when one changes.
"""

import base64
import json
import time
import zlib
from typing import Optional

from runner.record import names

MLFLOW_MAJOR = 3  # the UI whose view-state format this module writes
TAG_PREFIX = "mlflow.sharedViewState."  # the UI's prefix for shared (and saved) views
SHARE_KEY_PARAM = "viewStateShareKey"  # the URL parameter that opens one
DEFLATE_PREFIX = "deflate;"
TAG_VALUE_LIMIT = 5000  # MLflow's experiment tag value limit is larger (20,000); stay well inside
RUN_NAME_COLUMN = "attributes.`Run Name`"
RUN_NAME_WIDTH = 340
RUN_COLOR_TAG = "mlflow.runColor"  # a run's colour in the UI's charts and tables (MLflow's tag)
KERNEL_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                 "#17becf", "#bcbd22"]  # a kernel's line, in the order of their names
REFERENCE_COLORS = ["#000000", "#7f7f7f", "#c7c7c7"]  # a library's line: black, then greys
SECTION_NAME = "Sweep: rate against size (x axis: Step = the size)"


def installed_major() -> int:
    import mlflow

    return int(mlflow.__version__.split(".")[0])


def column(kind: str, key: str) -> str:
    """A column's id and sort key as the UI spells it: params.`M`, metrics.`perf/gflops`."""
    return f"{kind}.`{key}`"


def share_key(parent) -> str:
    """The view's key: one per sweep, from its parent's run id (letters, digits and '-')."""
    return f"gemmlab-{parent.info.run_id[:12]}"


def _is_series(run) -> bool:
    return run.data.tags.get(names.SERIES) == "true"


def columns(children: list) -> list[str]:
    """The table's columns, in order: kernel, backend, size, rate, headline %, the samples'
    noise (above 0.03: marked † in the parent's table), the reference library, precision,
    hygiene, tiling (each only where some job of the sweep recorded it)."""
    jobs = [r for r in children if not _is_series(r)] or children
    params = {k for r in jobs for k in r.data.params}
    metrics = {k for r in jobs for k in r.data.metrics}
    tags = {k for r in jobs for k in r.data.tags}
    wanted = [column("params", k) for k in (names.KERNEL_NAME, names.BACKEND_NAME, names.M,
                                             names.N, names.K) if k in params]
    percent = ([names.PCT_OF_REFERENCE] if names.PCT_OF_REFERENCE in metrics
               else [names.PCT_OF_VENDOR, names.PCT_OF_VENDOR_TF32])  # a store from before it
    wanted += [column("metrics", k) for k in (_rate_key(jobs), *percent, names.TIME_NOISE)
               if k in metrics]
    wanted += [column("tags", k) for k in (names.REFERENCE,) if k in tags]
    wanted += [column("params", k) for k in (names.KERNEL_PRECISION,) if k in params]
    wanted += [column("tags", k) for k in (names.GPU_HYGIENE, names.HOST_HYGIENE) if k in tags]
    wanted += [column("params", k) for k in sorted(params)
               if k.startswith(names.KERNEL_PARAMS_PREFIX)]
    return wanted


def width(column_id: str) -> int:
    """A column's width in pixels: what its values need, its header cut where longer."""
    key = column_id.split("`")[1]
    if key in (names.M, names.N, names.K):
        return 64
    if column_id.startswith("metrics."):
        return 150 if "pct" in key else 110
    if key.startswith(names.KERNEL_PARAMS_PREFIX):
        return 90
    return 110


def _rate_key(children: list) -> str:
    metrics = {k for r in children if not _is_series(r) for k in r.data.metrics}
    return names.GFLOPS if names.GFLOPS in metrics or names.GBPS not in metrics else names.GBPS


def _section_name(key: str) -> str:
    """The chart section MLflow files a metric under: its prefix before the last '/'."""
    return key.rsplit("/", 1)[0] if "/" in key else "Model metrics"


def charts(children: list, rate: Optional[str] = None) -> tuple[list[dict], list[dict]]:
    """The chart view: first a section with the sweep's rate against size (the series runs'
    shared key, one line per kernel and reference) and its headline % per job; every other
    metric's section listed after it, collapsed, so that MLflow files its charts there."""
    section = "gemmlab-sweep"
    metrics = {k for r in children for k in r.data.metrics}
    jobs_metrics = {k for r in children if not _is_series(r) for k in r.data.metrics}
    rate = rate or _rate_key(children)  # the jobs' rate: the series runs' key follows it
    series = names.SERIES_RATE_GFLOPS if rate == names.GFLOPS else names.SERIES_RATE_GBPS
    unit = "GFLOPS" if rate == names.GFLOPS else "GB/s"
    found = []
    for key, title in ((series, f"{unit} against size (x axis: Step = the size)"),
                       (series + names.SERIES_ODD_SUFFIX,
                        f"{unit} of shapes that are not square (x axis: Step = (MNK)^(1/3))")):
        if key in metrics:
            found.append({**_chart("LINE", key, title, section, len(found)),
                          "selectedMetricKeys": [key], "lineSmoothness": 0,
                          "xAxisScaleType": "linear", "scaleType": _scale(children, key),
                          "range": {}, "xAxisKey": "step", "selectedXAxisMetricKey": "",
                          "yAxisKey": "metric", "yAxisExpressions": [], "ignoreOutliers": False,
                          "useGlobalXaxisKey": False, "useGlobalLineSmoothing": False,
                          "displayPoints": True})
    percent = (names.PCT_OF_REFERENCE if names.PCT_OF_REFERENCE in jobs_metrics
               else names.PCT_OF_VENDOR)
    for key, title in ((rate, f"{unit} per job"), (percent, "% of the reference per job")):
        if key in jobs_metrics:
            found.append({**_chart("BAR", key, title, section, len(found)),
                          "selectedMetricKeys": [key], "runsCountToCompare": 100})
    plotted = {chart["metricKey"] for chart in found}
    others = sorted({_section_name(k) for k in metrics - plotted})
    sections = [{"uuid": section, "name": SECTION_NAME, "display": True, "isReordered": True,
                 "deleted": False, "isGenerated": False, "columns": 2, "cardHeight": 480}]
    sections += [{"uuid": f"gemmlab-{i}", "name": name, "display": False, "isReordered": False,
                  "deleted": False, "isGenerated": True} for i, name in enumerate(others)]
    return found, sections


def _scale(runs: list, key: str) -> str:
    """A log y axis where the lines lie more than 10x apart (a CPU's numpy against naive
    kernels), else linear (judged by each line's last point)."""
    values = [r.data.metrics[key] for r in runs if r.data.metrics.get(key, 0) > 0]
    return "log" if values and max(values) > 10 * min(values) else "linear"


def _chart(kind: str, key: str, title: str, section: str, index: int) -> dict:
    return {"uuid": f"gemmlab-chart-{index}", "type": kind, "metricKey": key,
            "displayName": title, "metricSectionId": section, "deleted": False,
            "isGenerated": False, "runsCountToCompare": 100}


def view_state(parent, children: list, lines: bool = False) -> dict:
    """The view of a sweep: its jobs, best rate first, with the columns above; or (`lines`)
    its series runs alone, so that the chart view's first chart is rate against size with a
    line (and a legend entry) per kernel and reference. Every run drawn, not the first ten."""
    series = [r for r in children if _is_series(r)]
    jobs = [r for r in children if not _is_series(r)]
    shown = columns(jobs or children)
    rate = _rate_key(jobs or children)
    chart_list, sections = charts(series if lines else jobs or children, rate)
    where = f"tags.`{names.PARENT_RUN_ID}` = '{parent.info.run_id}'"
    if series:  # the jobs, or the lines, never both: a chart's legend lists every run shown
        where += f" and tags.`{names.STATUS}` {'=' if lines else '!='} '{names.SERIES_STATUS}'"
    return {
        "searchFilter": where,
        "orderByKey": column("tags", names.RUN_NAME) if lines
        else column("metrics", rate),
        "orderByAsc": bool(lines),
        "selectedColumns": shown,
        "columnOrder": [RUN_NAME_COLUMN, *shown],
        "columnWidths": {RUN_NAME_COLUMN: RUN_NAME_WIDTH, **{c: width(c) for c in shown}},
        "runsHiddenMode": "SHOW_ALL",
        "compareRunCharts": chart_list,
        "compareRunSections": sections,
        "isAccordionReordered": True,
        "hideEmptyCharts": True,
        "globalLineChartConfig": {"xAxisKey": "step", "lineSmoothness": 0,
                                  "selectedXAxisMetricKey": ""},
    }


def line_colors(children: list) -> dict:
    """A colour per series run that no other line of the chart shares: kernels from a
    ten-colour palette in the order of their names, reference libraries black and grey
    (MLflow's own colours, drawn from each run's id, may give two lines the same)."""
    series = sorted((r for r in children if _is_series(r)), key=lambda r: r.info.run_name or "")
    references = [r for r in series if names.KERNEL not in r.data.tags]
    kernels = [r for r in series if names.KERNEL in r.data.tags]
    colors = {r.info.run_id: KERNEL_COLORS[i % len(KERNEL_COLORS)]
              for i, r in enumerate(kernels)}
    colors.update({r.info.run_id: REFERENCE_COLORS[i % len(REFERENCE_COLORS)]
                   for i, r in enumerate(references)})
    return colors


def envelope(name: str, state: dict, now_ms: Optional[int] = None) -> str:
    """The tag's value: the saved view's envelope around the state (deflated if it is long)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    text = json.dumps(state, separators=(",", ":"))
    if len(text) > TAG_VALUE_LIMIT - 500:
        text = DEFLATE_PREFIX + base64.b64encode(zlib.compress(text.encode())).decode("ascii")
    return json.dumps({"name": name, "createdAt": now_ms, "updatedAt": now_ms, "state": text},
                      separators=(",", ":"))


def read_state(value: str) -> dict:
    """The state inside a tag's value (the inverse of envelope)."""
    text = json.loads(value)["state"]
    if text.startswith(DEFLATE_PREFIX):
        text = zlib.decompress(base64.b64decode(text[len(DEFLATE_PREFIX):])).decode()
    return json.loads(text)


def write_view(client, parent, children: list) -> Optional[tuple[str, str]]:
    """Write the sweep's views into its experiment's tags: the share keys of its runs table and
    of its chart view (the same where the sweep has no series runs, a store from before them);
    None where the installed MLflow is not the major version this format was read from."""
    if installed_major() != MLFLOW_MAJOR:
        return None
    key = share_key(parent)
    name = f"gemmlab: {parent.info.run_name}"[:180]
    client.set_experiment_tag(parent.info.experiment_id, TAG_PREFIX + key,
                              envelope(name, view_state(parent, children)))
    if not any(_is_series(r) for r in children):
        return key, key
    tagged = {r.info.run_id: r.data.tags.get(RUN_COLOR_TAG) for r in children}
    for run_id, color in line_colors(children).items():
        if tagged.get(run_id) != color:
            client.set_tag(run_id, RUN_COLOR_TAG, color)
    client.set_experiment_tag(parent.info.experiment_id, TAG_PREFIX + key + "-lines",
                              envelope(name + " (lines)", view_state(parent, children, True)))
    return key, key + "-lines"


def view_url(base: str, experiment_id: str, key: str, charts: bool = False) -> str:
    mode = "&compareRunsMode=CHART" if charts else ""
    return f"{base}/#/experiments/{experiment_id}/runs?{SHARE_KEY_PARAM}={key}{mode}"
