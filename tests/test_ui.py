"""`gemmlab ui`: the sweeps it lists, the sweep `--sweep` opens, the view it writes into the
experiment's tags, and that view's format pinned to the installed MLflow's own UI code."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from runner import ui, ui_views
from runner.record import names
from runner.results import runs as recorded

BASE = "http://127.0.0.1:5999"


def _job(client, experiment, parent, kernel, size, gflops, pct):
    run = client.create_run(experiment, run_name=f"{kernel} {size}", tags={
        names.PARENT_RUN_ID: parent, names.STATUS: "ok", names.GPU_HYGIENE: "clean"})
    for key, value in ((names.KERNEL_NAME, kernel), (names.BACKEND_NAME, "opencl"),
                       (names.M, size), (names.N, size), (names.K, size),
                       (names.KERNEL_PARAMS_PREFIX + "TS", 16)):
        client.log_param(run.info.run_id, key, value)
    client.log_metric(run.info.run_id, names.GFLOPS, gflops)
    client.log_metric(run.info.run_id, names.PCT_OF_REFERENCE, pct)
    client.set_terminated(run.info.run_id)


def _sweep(client, experiment, name, series=True):
    parent = client.create_run(experiment, run_name=name, tags={names.SWEEP: "true"})
    pid = parent.info.run_id
    for kernel in ("matmul_1", "matmul_2"):
        for size, rate in ((64, 1.0), (128, 2.0)):
            _job(client, experiment, pid, kernel, size, rate, 10 * rate)
        if series:
            line = client.create_run(experiment, run_name=f"{kernel} on opencl", tags={
                names.PARENT_RUN_ID: pid, names.SERIES: "true", names.KERNEL: kernel,
                names.STATUS: names.SERIES_STATUS})
            for step, rate in ((64, 1.0), (128, 2.0)):
                client.log_metric(line.info.run_id, names.SERIES_RATE_GFLOPS, rate, step=step)
            client.set_terminated(line.info.run_id)
    client.set_terminated(pid)
    return client.get_run(pid)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Two sweeps in two experiments: an older one without series runs, a newer one with."""
    root = tmp_path_factory.mktemp("ui")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    old = _sweep(client, client.create_experiment("a", artifact_location=str(root / "art")),
                 "kernel=matmul_1,matmul_2 size=64,128 · opencl sweep", series=False)
    time.sleep(0.01)
    new = _sweep(client, client.create_experiment("b", artifact_location=str(root / "art")),
                 "newer · opencl sweep")
    return uri, client, old, new


def test_lists_every_sweep_newest_first_and_opens_the_newest(store):
    uri, client, old, new = store
    lines = ui.describe(client, uri, BASE, None, view=False)
    text = "\n".join(lines)
    assert text.index(new.info.run_id[:8]) < text.index(old.info.run_id[:8])
    row = next(line for line in lines if line.strip().startswith(old.info.run_id[:8]))
    assert "opencl" in row and "4 jobs" in row and "UTC" in row  # series runs are no jobs
    assert ui.run_url(BASE, old) in text and ui.run_url(BASE, new) in text
    assert f"opened: {new.info.run_name}" in text
    assert "viewStateShareKey" not in text  # --no-view: nothing written


@pytest.mark.parametrize("how", ["id", "short id", "name"])
def test_sweep_opens_the_one_named(store, how):
    uri, client, old, _ = store
    named = {"id": old.info.run_id, "short id": old.info.run_id[:8],
             "name": old.info.run_name}[how]
    text = "\n".join(ui.describe(client, uri, BASE, named, view=False))
    assert f"opened: {old.info.run_name} ({old.info.run_id[:8]}, 4 jobs)" in text


def test_a_sweep_not_in_the_store_is_one_line(store):
    uri, client, _, _ = store
    with pytest.raises(recorded.NoRuns, match="gemmlab: error: no sweep"):
        ui.describe(client, uri, BASE, "no such sweep", view=True)


def test_the_view_is_written_into_the_experiment_and_its_url_printed(store):
    uri, client, old, new = store
    text = "\n".join(ui.describe(client, uri, BASE, new.info.run_id, view=True))
    key = ui_views.share_key(new)
    assert ui_views.view_url(BASE, new.info.experiment_id, key) in text
    assert ui_views.view_url(BASE, new.info.experiment_id, key + "-lines", charts=True) in text
    tags = client.get_experiment(new.info.experiment_id).tags
    jobs = ui_views.read_state(tags[ui_views.TAG_PREFIX + key])
    assert jobs["searchFilter"] == (f"tags.`{names.PARENT_RUN_ID}` = '{new.info.run_id}' and "
                                    f"tags.`{names.STATUS}` != '{names.SERIES_STATUS}'")
    assert jobs["orderByKey"] == f"metrics.`{names.GFLOPS}`" and jobs["orderByAsc"] is False
    assert jobs["selectedColumns"] == [
        f"params.`{names.KERNEL_NAME}`", f"params.`{names.BACKEND_NAME}`", f"params.`{names.M}`",
        f"params.`{names.N}`", f"params.`{names.K}`", f"metrics.`{names.GFLOPS}`",
        f"metrics.`{names.PCT_OF_REFERENCE}`", f"tags.`{names.GPU_HYGIENE}`",
        f"params.`{names.KERNEL_PARAMS_PREFIX}TS`"]
    lines = ui_views.read_state(tags[ui_views.TAG_PREFIX + key + "-lines"])
    assert f"tags.`{names.STATUS}` = '{names.SERIES_STATUS}'" in lines["searchFilter"]
    first = lines["compareRunCharts"][0]
    assert (first["type"], first["metricKey"], first["xAxisKey"]) == (
        "LINE", names.SERIES_RATE_GFLOPS, "step")
    assert first["metricSectionId"] == lines["compareRunSections"][0]["uuid"]
    assert lines["compareRunSections"][0]["display"] and lines["isAccordionReordered"]
    colors = {r.info.run_name: r.data.tags.get(ui_views.RUN_COLOR_TAG) for r in ui.children(
        client, new) if r.data.tags.get(names.SERIES) == "true"}
    assert colors == {"matmul_1 on opencl": ui_views.KERNEL_COLORS[0],
                      "matmul_2 on opencl": ui_views.KERNEL_COLORS[1]}
    # a sweep recorded before series runs: one view, its chart view the jobs' bars
    text = "\n".join(ui.describe(client, uri, BASE, old.info.run_id, view=True))
    key = ui_views.share_key(old)
    assert ui_views.view_url(BASE, old.info.experiment_id, key, charts=True) in text


def test_a_store_that_refuses_the_view_still_gets_its_urls(store, monkeypatch):
    uri, client, old, _ = store

    def refuse(*args):
        raise PermissionError("attempt to write a readonly database")

    monkeypatch.setattr(ui_views, "write_view", refuse)
    text = "\n".join(ui.describe(client, uri, BASE, old.info.run_id, view=True))
    assert "(no view written: attempt to write a readonly database)" in text
    assert ui.run_url(BASE, old) in text and "viewStateShareKey" not in text


def test_a_copy_sweep_charts_its_bandwidth_series():
    def run(metrics, tags):
        return SimpleNamespace(info=SimpleNamespace(run_id="r", run_name="x"),
                               data=SimpleNamespace(metrics=metrics, params={}, tags=tags))

    parent = SimpleNamespace(info=SimpleNamespace(run_id="p" * 32))
    jobs = [run({names.GBPS: 100.0}, {names.STATUS: "ok"})]
    lines = [run({names.SERIES_RATE_GBPS: 100.0}, {names.SERIES: "true"})]
    state = ui_views.view_state(parent, jobs + lines, lines=True)
    assert [c["metricKey"] for c in state["compareRunCharts"]] == [names.SERIES_RATE_GBPS]
    assert ui_views.view_state(parent, jobs + lines)["orderByKey"] == f"metrics.`{names.GBPS}`"


def test_a_long_state_is_deflated_as_the_ui_reads_it():
    state = {"selectedColumns": [f"params.`kernel.params.P{i}`" for i in range(400)]}
    value = ui_views.envelope("long", state, now_ms=1)
    assert json.loads(value)["state"].startswith(ui_views.DEFLATE_PREFIX)
    assert ui_views.read_state(value) == state and len(value) < ui_views.TAG_VALUE_LIMIT


# ------------------------------------------------------------------ the format, pinned to MLflow
def _bundle() -> str:
    js = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    return "".join(path.read_text(errors="replace") for path in sorted(js.glob("*.js")))


def _string_array(bundle: str, having: set[str], lacking: set[str] = frozenset()) -> set[str]:
    """The members of the first JS array literal of strings that holds every one of `having`
    and none of `lacking`."""
    for found in re.finditer(r'\[(?:"[A-Za-z]+",)+"[A-Za-z]+"\]', bundle):
        members = set(json.loads(found.group(0)))
        if having <= members and not lacking & members:
            return members
    raise AssertionError(f"no array of strings holding {sorted(having)} in MLflow's UI")


def test_the_view_state_format_is_the_installed_mlflow_uis():
    """Every key and literal gemmlab writes, as the installed MLflow's UI reads it. This fails
    when MLflow changes its format: read mlflow/server/js/build/static/js again (the shared view
    hook reads `mlflow.sharedViewState.<viewStateShareKey>`, parses the saved-view envelope,
    picks the search facets and the UI state keys) and update runner/ui_views.py."""
    assert int(mlflow.__version__.split(".")[0]) == ui_views.MLFLOW_MAJOR
    bundle = _bundle()
    assert f'"{ui_views.TAG_PREFIX}"' in bundle and f'"{ui_views.SHARE_KEY_PARAM}"' in bundle
    assert "Invalid saved-view envelope: expected an object with a string `name`, number " \
           "`createdAt`, and string `state`" in bundle
    assert f'"{ui_views.DEFLATE_PREFIX}"' in bundle
    assert 'e+".`"+t+"`"' in bundle  # column ids and sort keys: kind.`name`
    assert 'RUN_NAME:"tags.`mlflow.runName`"' in bundle
    assert 'GF)(u.RO.ATTRIBUTES,"Run Name")' in bundle  # the run name column's id
    facets = _string_array(bundle, {"searchFilter", "orderByKey", "orderByAsc"})
    ui_state = _string_array(bundle, {"selectedColumns", "compareRunCharts", "runsExpanded"})
    not_shared = _string_array(bundle, {"runsExpanded", "autoRefreshEnabled"},
                               lacking={"selectedColumns"})  # the UI drops these from a share
    run = mlflow.entities.Run(mlflow.entities.RunInfo("a" * 32, "1", "u", "FINISHED", 0, 1,
                                                      "active"), mlflow.entities.RunData())
    state = ui_views.view_state(run, [])
    assert set(state) <= facets | ui_state and not set(state) & not_shared
    assert "SHOW_ALL" in bundle and '"isAccordionReordered"' in bundle
    for field in ("selectedMetricKeys", "metricSectionId", "xAxisKey", "useGlobalXaxisKey",
                  "scaleType", "xAxisScaleType",
                  "isReordered", "runsCountToCompare", "displayName"):
        assert f"this.{field}=" in bundle or f"{field}:" in bundle, field
    assert f'"{ui_views.RUN_COLOR_TAG}"' in bundle  # read from each run's tags for its colour
    assert "t.columns" in bundle and "t.cardHeight" in bundle  # a section's layout
    assert 'e.LINE="LINE"' in bundle and 'e.BAR="BAR"' in bundle and 'e.STEP="step"' in bundle


# ------------------------------------------------------------------ the real server
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_gemmlab_ui_serves_the_view_it_printed(store):
    """`python -m runner.ui --sweep …` prints the view's URL before the server answers; the
    server then serves the experiment with the view's tag; SIGTERM stops it (under 20 s)."""
    uri, _, _, new = store
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "runner.ui", "--uri", uri, "--port",
                                str(port), "--sweep", new.info.run_id[:8]],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        printed = []
        for line in process.stdout:
            printed.append(line)
            if "answering on" in line:
                break
        text = "".join(printed)
        key = ui_views.share_key(new)
        assert text.index(f"viewStateShareKey={key}") < text.index("answering on")
        api = (f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/experiments/get?experiment_id="
               f"{new.info.experiment_id}")
        experiment = json.load(urllib.request.urlopen(api, timeout=10))["experiment"]
        assert ui_views.TAG_PREFIX + key in {t["key"] for t in experiment["tags"]}
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read()
        assert b"<html" in page.lower()
    finally:
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_the_runs_table_shows_the_samples_noise_where_the_jobs_recorded_it():
    def job(noise=None):
        metrics = {names.GFLOPS: 1.0, **({names.TIME_NOISE: noise} if noise is not None else {})}
        return SimpleNamespace(data=SimpleNamespace(
            params={names.KERNEL_NAME: "matmul_9"}, metrics=metrics,
            tags={names.GPU_HYGIENE: "clean"}))

    noise = f"metrics.`{names.TIME_NOISE}`"
    shown = ui_views.columns([job(0.004), job(2.09)])
    assert shown.index(f"metrics.`{names.GFLOPS}`") + 1 == shown.index(noise)  # beside the rate
    assert noise not in ui_views.columns([job()])  # a store from before the noise was recorded
