"""Reading runs back from MLflow: the one way the report, the seeds' tables, the tuning page and
`gemmlab ui` find a store's experiments, sweeps and runs, and the provenance block their pages
print under each device.

    client(uri) -> MlflowClient        search(client, ids, filter) -> every page, newest first
    experiment_ids(client, name)       find_sweep(client, id | short id | name, ids)
    latest_sweep(client, ids)          load_runs(uri, experiment, sweep) -> runs (no parents)
    select(runs, backend, device)      provenance(runs, uri) -> Markdown lines

A sweep's series runs (lines of its chart, tag gemmlab.series) are never data: `search`
leaves them out unless asked (`series=True`).

Errors a user can fix (no such experiment, sweep or run) are `NoRuns`, a SystemExit whose
message is the one line `gemmlab: error: …` the commands print.
"""

import datetime as dt
import re
from pathlib import Path
from typing import Optional

from runner.record import names

DEFAULT_URI = "sqlite:///mlflow.db"
DEFAULT_OUT = "gemmlab-pages"  # in the working directory: never the project's docs/ unasked
MEASURED = ("ok", "cached")  # runs whose metrics are a measurement (cached: copied from one)


class NoRuns(SystemExit):
    """Nothing to read: exits 1 with `gemmlab: error: <what>` on stderr."""

    def __init__(self, message: str):
        super().__init__(f"gemmlab: error: {message}")


def out_folder(out: Optional[str]) -> Path:
    """Where a command writes its pages: the folder given, else ./gemmlab-pages."""
    return Path(out) if out else Path(DEFAULT_OUT)


def client(uri: str):
    """A client of the store at `uri`; a sqlite file that does not exist is an error here,
    never a new empty store created by reading."""
    from mlflow.tracking import MlflowClient

    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):])
        if not path.is_file():
            raise NoRuns(f"no MLflow store at {uri} ({path.resolve()} does not exist; give "
                         "--uri)")

    return MlflowClient(tracking_uri=uri)


def search(mlflow_client, experiment_ids: list[str], filter_string: str = "",
           series: bool = False) -> list:
    """Every matching run (all pages), newest first; a sweep's series runs (lines of its
    chart, tag gemmlab.series, never a measurement) only with `series`."""
    runs, token = [], None
    while True:
        page = mlflow_client.search_runs(experiment_ids, filter_string, max_results=1000,
                                         order_by=["attributes.start_time DESC"],
                                         page_token=token)
        runs += [run for run in page
                 if series or run.data.tags.get(names.SERIES) != "true"]
        token = page.token
        if not token:
            return runs


def experiment_ids(mlflow_client, experiment: Optional[str]) -> list[str]:
    """The named experiment's id, or every experiment's."""
    if experiment is None:
        return [e.experiment_id for e in mlflow_client.search_experiments()]
    found = mlflow_client.get_experiment_by_name(experiment)
    if found is None:
        raise NoRuns(f"no experiment {experiment!r}")
    return [found.experiment_id]


def sweeps(mlflow_client, ids: list[str]) -> list:
    """Every sweep's parent run in these experiments, newest first."""
    return search(mlflow_client, ids, f"tags.`{names.SWEEP}` = 'true'") if ids else []


def latest_sweep(mlflow_client, ids: list[str]):
    """The newest sweep's parent run, or None."""
    found = sweeps(mlflow_client, ids)
    return found[0] if found else None


def find_sweep(mlflow_client, sweep: str, ids: list[str]):
    """The parent run named by its id, a prefix of it (the short id pages and the terminal
    print, e.g. `efb041fa`), or its run name (the newest sweep of that name)."""
    try:
        parent = mlflow_client.get_run(sweep)
        if parent.info.experiment_id in ids:
            return parent
    except Exception:  # not a whole run id: a short id or a run name
        pass
    if re.fullmatch(r"[0-9a-f]{4,31}", sweep):
        short = [r for r in sweeps(mlflow_client, ids) if r.info.run_id.startswith(sweep)]
        if len(short) == 1:
            return short[0]
        if len(short) > 1:
            raise NoRuns(f"{len(short)} sweeps have ids starting {sweep!r}: give more of it")
    quoted = sweep.replace("'", "\\'")
    named = search(mlflow_client, ids, f"attributes.run_name = '{quoted}'")
    parents = [r for r in named if r.data.tags.get(names.SWEEP) == "true"] or named
    if not parents:
        raise NoRuns(f"no sweep with run id or name {sweep!r}")
    return parents[0]


def load_runs(uri: str, experiment: Optional[str] = None, sweep: Optional[str] = None) -> list:
    """The runs of an experiment, or the children of one sweep (in every experiment unless an
    experiment is named), newest first; sweep parents themselves are never data."""
    mlflow_client = client(uri)
    ids = experiment_ids(mlflow_client, experiment)
    if sweep is not None:
        parent = find_sweep(mlflow_client, sweep, ids)
        runs = search(mlflow_client, ids, f"tags.`{names.PARENT_RUN_ID}` = '{parent.info.run_id}'")
        where = f"sweep {parent.info.run_name!r} ({parent.info.run_id})"
    else:
        runs = search(mlflow_client, ids) if ids else []
        where = f"experiment {experiment!r}"
    runs = [r for r in runs if r.data.tags.get(names.SWEEP) != "true"
            and r.data.tags.get(names.CEILING) != "true"
            and r.data.tags.get(names.SERIES) != "true"]
    if not runs:
        raise NoRuns(f"no runs in {where} at {uri}")
    return runs


def ceilings(uri: str, experiment: Optional[str]) -> dict[str, dict]:
    """The newest recorded ceilings (`python -m runner.ceiling --experiment …`) of each device
    in the experiment, by device name: their metrics in TFLOPS."""
    mlflow_client = client(uri)
    ids = experiment_ids(mlflow_client, experiment) if experiment else []
    found: dict[str, dict] = {}
    for run in search(mlflow_client, ids, f"tags.`{names.CEILING}` = 'true'") if ids else []:
        found.setdefault(run.data.tags.get(names.DEVICE_NAME, "?"), dict(run.data.metrics))
    return found


def select(runs: list, backend: Optional[str] = None, device: Optional[str] = None) -> list:
    """Runs of one backend (exact name) and/or whose device.name contains `device` (any case).
    Runs refused before a device was opened carry no device name and drop out under --device."""
    if backend is not None:
        runs = [r for r in runs if r.data.params.get(names.BACKEND_NAME) == backend]
    if device is not None:
        runs = [r for r in runs
                if device.lower() in r.data.tags.get(names.DEVICE_NAME, "").lower()]
    return runs


def vendor_names(runs: list, tf32: bool = False) -> list[str]:
    """The vendor libraries these runs were compared with (their `vendor.name` tags; with
    `tf32`, also `vendor_tf32.name`: cuBLAS TF32, where TF32 and 3xTF32 steps met it too)."""
    keys = (names.VENDOR_NAME, names.VENDOR_TF32_NAME) if tf32 else (names.VENDOR_NAME,)
    return sorted({r.data.tags[key] for r in runs for key in keys if r.data.tags.get(key)})


def as_read_from(command: str, uri: Optional[str]) -> str:
    """The recorded command with its store override replaced by the store the page was read
    from: a sweep run elsewhere (a GPU machine, a scratch folder) and copied here recorded an
    absolute path that means nothing to a reader, who reruns it against the page's store."""
    if uri is None:
        return command
    return re.sub(r"(?<!\S)(\+{0,2})tracking\.uri=\S+",
                  lambda found: f"{found.group(1)}tracking.uri={uri}", command)


def provenance(runs: list, uri: Optional[str] = None, extra: tuple = (),
               commands_label: str = "measured by") -> list[str]:
    """Where and how these runs were measured, as a Markdown list: the device, its driver and
    platform, the vendor baseline, the date of the newest run, the runner and its commit(s),
    any `extra` lines, then every command (with its store as this page read it)."""
    newest = max(runs, key=lambda r: r.info.start_time)
    tags = newest.data.tags
    when = dt.datetime.fromtimestamp(newest.info.start_time / 1000, dt.timezone.utc)
    commits = sorted({r.data.tags.get(names.GIT_COMMIT, "?") for r in runs})
    commands = sorted({as_read_from(r.data.tags.get(names.COMMAND, "?"), uri) for r in runs})
    devices = sorted({r.data.tags.get(names.DEVICE_NAME, "?") for r in runs})
    return [f"- device: {', '.join(devices)}",
            f"- driver: {tags.get(names.DEVICE_DRIVER, '?')}",
            f"- platform: {tags.get(names.DEVICE_PLATFORM, '?')}",
            f"- vendor baseline: {', '.join(vendor_names(runs, tf32=True)) or 'none'}",
            f"- date (UTC) of the newest run: {when:%Y-%m-%d %H:%M}",
            f"- runner: {tags.get(names.RUNNER_VERSION, '?')}, commit(s) " + ", ".join(commits),
            *extra,
            f"- {commands_label}:", *[f"  - `{c}`" for c in commands]]
