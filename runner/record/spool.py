"""Records a tracking server could not take while it was not answering, kept on disk until it
answers again, then written there exactly once.

Where: one folder per server, `$GEMMLAB_SPOOL/<key>/`, by default
`$XDG_CACHE_HOME/gemmlab/spool/<key>/` (~/.cache/…), <key> the first 16 hex digits of the
sha256 of its tracking.uri, with a file `uri` naming it. A cluster's nodes share the home
directory, so the records of a Slurm job that ran on another node land where the command that
submitted it (and `gemmlab sync`) look. `GEMMLAB_SPOOL=off` keeps nothing.

One file per record, `<record id>.<kind>.json`, written whole (under a temporary name, then
renamed), so a reader sees a record complete or not at all:
- `run`: one run as gemmlab would have written it (runner/record/tracking.py, Recorder): its
  run id where the server had opened it, else the experiment, parent, name and start tags to
  open it with; its params, metrics, tags, text artifacts, status and end time.
- other kinds (a sweep's end, `sweep`) are written by the layer that knows them, and written
  back by the handler it passes to `replay`.

Written back by `replay(uri, handlers)` (runner/sync.py: a sweep's end, the next gemmlab
command on that tracking.uri, `gemmlab sync`), under a lock in the folder so that two commands
replaying at once write each record once; runs first, then the rest, oldest first. A record
leaves the folder once it is written. Exactly once: every run gemmlab opens carries the tag
`gemmlab.record_id`, and a run record whose server run id is unknown (the server may have
created it, its answer lost) is first looked for by that tag; params, tags and artifacts are
written again as the same values, and MLflow keeps one copy of a metric logged twice with the
same key, value, time and step. A record the server refuses (4xx: a deleted run, a changed
experiment) is moved to `failed/` with the reason beside it, never retried for ever.
"""

import json
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from runner.record import names
from runner.record.server import SPOOL_ENV, not_answering, spool_folder, spool_root

RUN = "run"  # a run's record (runner/record/tracking.py, Recorder)
SWEEP_END = "sweep"  # a sweep's end (runner/sweep/callback.py, written back by runner/sync.py)
LOCK_TIMEOUT_S = 600  # another command writing a long spool back


def keep(uri: str, kind: str, record_id: str, record: dict) -> Optional[Path]:
    """Write `record` (JSON) into the spool of `uri`, whole; its path, or None where the spool
    is off. An OSError (a full or unwritable disk) is raised: the caller says it is lost."""
    folder = spool_folder(uri)
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "uri").exists():  # the same text from every writer (Slurm jobs too)
        (folder / "uri").write_text(str(uri).rstrip("/") + "\n")
    path = folder / f"{record_id}.{kind}.json"
    record = {"kind": kind, "uri": str(uri), "record_id": record_id,
              "kept_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **record}
    handle, partial = tempfile.mkstemp(dir=folder, prefix=f".{record_id}.", suffix=".partial")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(record, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return path


def keep_run(uri: str, record_id: str, record: dict) -> Path:
    """A run's whole record kept (`keep`), or a RuntimeError saying it is lost and why."""
    try:
        path = keep(uri, RUN, record_id, record)
    except OSError as error:
        raise RuntimeError(f"the MLflow server at {uri} is not answering, and this run's record "
                           f"could not be kept in the spool {spool_folder(uri)}: {error}"
                           ) from None
    if path is None:
        raise RuntimeError(f"the MLflow server at {uri} is not answering, and the spool is off "
                           f"({SPOOL_ENV}=off): this run's record is lost")
    return path


def pending(uri: str) -> list[Path]:
    """The records kept for `uri`: runs first, then the other kinds, each oldest first."""
    folder = spool_folder(uri)
    if folder is None or not folder.is_dir():
        return []
    files = [path for path in folder.glob("*.json") if not path.name.startswith(".")]

    def order(path: Path):
        kind = path.name.rsplit(".", 2)[-2]
        try:
            stamp = path.stat().st_mtime
        except OSError:
            stamp = 0.0
        return (kind != RUN, stamp, path.name)
    return sorted(files, key=order)


def spooled_servers() -> list[str]:
    """Every tracking.uri with records kept (or failed) in the spool, for `gemmlab sync`."""
    root = spool_root()
    if root is None or not root.is_dir():
        return []
    servers = []
    for folder in sorted(root.iterdir()):
        named = folder / "uri"
        if named.is_file() and (any(folder.glob("*.json"))):
            servers.append(named.read_text().strip())
    return servers


@dataclass
class Replayed:
    """What `replay` did: records written by kind, records left (the server stopped answering
    again, or no handler for their kind), and records the server refused (moved to failed/)."""
    written: Counter = field(default_factory=Counter)
    left: int = 0
    failed: list = field(default_factory=list)  # (path in failed/, reason)
    folder: Optional[Path] = None

    def line(self, uri: str) -> str:
        """e.g. `wrote 3 runs and 1 sweep end kept while http://… was not answering`."""
        parts = [f"{count} {kind}{'s' if count > 1 else ''}" for kind, count in
                 sorted(self.written.items(), key=lambda item: item[0] != RUN)]
        return (f"wrote {' and '.join(parts) or 'nothing'} kept in {self.folder} while the "
                f"MLflow server at {uri} was not answering")


def replay(uri: str, handlers: Optional[dict[str, Callable]] = None, client=None,
           wait_s: float = LOCK_TIMEOUT_S) -> Replayed:
    """Write the records kept for `uri` to it (see the module's doc), runs with `write_run`,
    other kinds with `handlers[kind](client, record)`; stops at the first that finds the server
    not answering. Raises nothing for a record: one the server refuses goes to failed/."""
    from filelock import FileLock, Timeout

    done = Replayed(folder=spool_folder(uri))
    files = pending(uri)
    if not files:
        return done
    if client is None:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(uri)
    handlers = {RUN: write_run, **(handlers or {})}
    lock = FileLock(str(done.folder / "replay.lock"))
    try:
        lock.acquire(timeout=wait_s)
    except Timeout:
        done.left = len(files)
        return done
    try:
        files = pending(uri)  # another command may have written some meanwhile
        for index, path in enumerate(files):
            try:
                record = json.loads(path.read_text())
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as error:
                done.failed.append((_set_aside(path, f"unreadable: {error}"), str(error)))
                continue
            handler = handlers.get(record.get("kind"))
            if handler is None:  # a kind this command cannot write (a sweep's end in a run)
                done.left += 1
                continue
            try:
                handler(client, record)
            except Exception as error:
                if not_answering(error):
                    done.left += len(files) - index
                    break
                reason = f"{type(error).__name__}: {str(error).strip()[:500]}"
                done.failed.append((_set_aside(path, reason), reason))
                continue
            path.unlink(missing_ok=True)
            done.written[record["kind"]] += 1
    finally:
        lock.release()
    return done


def _set_aside(path: Path, reason: str) -> Path:
    failed = path.parent / "failed"
    failed.mkdir(exist_ok=True)
    target = failed / path.name
    os.replace(path, target)
    target.with_suffix(".error.txt").write_text(reason + "\n")
    return target


def find_by_record_id(client, experiment_id: str, record_id: str):
    """The run of `experiment_id` tagged with this record id (any lifecycle), or None."""
    from mlflow.entities import ViewType

    found = client.search_runs([experiment_id],
                               f"tags.`{names.RECORD_ID}` = '{record_id}'",
                               run_view_type=ViewType.ALL, max_results=1)
    return found[0] if found else None


def write_run(client, record: dict) -> str:
    """Write a run record to the server: its run (opened now where the server never had it),
    then params, metrics, tags, artifacts, and its end; returns the run id."""
    from mlflow.entities import Metric, Param, RunTag

    run_id = record.get("run_id")
    if run_id is None:
        experiment_id = record["experiment_id"]
        found = find_by_record_id(client, experiment_id, record["record_id"])
        if found is not None:
            run_id = found.info.run_id
        else:
            run = client.create_run(experiment_id, start_time=record.get("start_time"),
                                    tags=record.get("start_tags") or {},
                                    run_name=record.get("run_name"))
            run_id = run.info.run_id
    stamp = int(record.get("metric_time") or record.get("end_time") or time.time() * 1000)
    client.log_batch(run_id,
                     metrics=[Metric(k, float(v), stamp, 0) for k, v in record.get("metrics", [])],
                     params=[Param(k, str(v)) for k, v in (record.get("params") or {}).items()],
                     tags=[RunTag(k, str(v)) for k, v in (record.get("tags") or {}).items()])
    texts = record.get("texts") or {}
    if texts:
        with tempfile.TemporaryDirectory() as folder:
            for artifact_path, text in texts.items():
                target = Path(folder, artifact_path)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
            client.log_artifacts(run_id, folder)
    client.set_terminated(run_id, record.get("status", "FINISHED"),
                          end_time=record.get("end_time"))
    return run_id
