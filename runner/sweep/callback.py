"""A multirun as one MLflow parent run with its jobs as children, through Hydra's own callback:
the parent's life, from its start to its end.

`SweepRecorder` is registered in `conf/config.yaml` (`hydra.callbacks`). In the process that
drives the sweep it opens the parent run before any job starts (creating the store once, so that
parallel jobs never race in its schema setup), hands the parent's id to every job through the
environment (runner/sweep/context.py), starts the progress bar (runner/sweep/monitor.py), and at
the end writes on the parent the sweep's bookkeeping (runner/sweep/bookkeeping.py), its
description and summary table (runner/sweep/summary.py), its report (runner/sweep/report_hook.py)
and its series runs (runner/sweep/series.py), and prints the best configuration per kernel and
size. Single runs never see any of this.

What the parent carries for MLflow's UI: its name says what was swept (runner/sweep/definition.py);
its description leads with a size × kernel table of the best rate; the counts, wall time and
overhead per job are tags (`gemmlab.sweep.jobs` …); under it, beside the jobs, its series runs.

How a sweep ends (docs/methodology.md, the exit codes): FINISHED, and the command exits 1 if any
job failed, was impossible, timed out or was interrupted (refused jobs are the spec doing its
job); KILLED by Ctrl-C or SIGTERM, the jobs a launcher's worker process was running when it was
killed marked KILLED too (`end_active_sweep`), the summary saying how many jobs did not run;
FAILED, with the reason, when an error ended it or when its first jobs all failed the same way
before reaching a device (no GPU, no CuPy, no such platform: `_stop_if_hopeless`), which no
other point of the sweep can change. A GPU pool (`gpus=N`) is checked against the GPUs there
are before any job starts.

On a tracking server (http://) the sweep starts only where the server answers this client's
API requests (a 403 for its host, a 401 for its credentials, any store error: one line, exit 1,
no job run). Records the server could not take while it was not answering are in the spool
(runner/record/spool.py): the sweep writes those kept earlier as it starts, and at its end waits
for a server that is down (up to GEMMLAB_SERVER_WAIT_S, 60 s) and writes them before its
summary; where it still does not answer, the parent's end joins the spool (runner/sweep/outage.py;
`write_kept_end` writes it later, from runner/sync.py too), the line says so, and the command
exits 1.
"""

import atexit
import csv
import io
import logging
import os
import sys
import time
from typing import Any, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from runner.errors import RunError
from runner.record import names, spool
from runner.record.server import down as server_down
from runner.record.server import is_server, mark_down, not_answering
from runner.results.records import rate as _rate
from runner.results.records import size_label as _size
from runner.results.records import status as _status
from runner.results.records import tiling as _tiling
from runner.results.records import unit as _unit
from runner.sweep.bookkeeping import bookkeeping_of, phases_line, phases_table, tag_value
from runner.sweep.context import PARENT_ENV, PARENT_EXPERIMENT_ENV
from runner.sweep.definition import (
    compiles_ahead,
    expected_jobs,
    override_texts,
    sweep_definition,
    sweep_name,
)
from runner.sweep import outage
from runner.sweep.monitor import ProgressMonitor
from runner.sweep.report_hook import log_report
from runner.sweep.series import log_series
from runner.sweep.summary import (
    SweepSummary,
    description,
    print_sweep_summary,
    sweep_children,
)

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
        if launcher.endswith(".GemmlabSlurmLauncher"):  # before anything is recorded or queued
            from runner.sweep.slurm import refusal_of

            refusal = refusal_of(config.hydra.launcher)
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
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        from runner.record.store import ensure_store
        from runner.record.tracking import (
            _quiet_mlflow,
            experiment_for,
            provenance_tags,
        )

        _quiet_mlflow()  # MLflow is imported: no INFO lines for the store's creation
        definition = sweep_definition(config)
        self._definition = definition
        self._expected = expected_jobs(config)
        self._name = sweep_name(config, definition)
        sweeper = OmegaConf.select(config, "hydra.sweeper._target_") or "?"
        tags = {**provenance_tags(), names.SWEEP: "true",
                names.SWEEP_OVERRIDES: " ".join(override_texts(config)),
                names.SWEEP_SWEEPER: sweeper.rsplit(".", 1)[-1],
                names.SWEEP_LAUNCHER: launcher.rsplit(".", 1)[-1],
                names.SWEEP_DIR: str(OmegaConf.select(config, "hydra.sweep.dir"))}
        params = [Param(f"{names.SWEEP_PARAM_PREFIX}{key}"[:250], values[:6000])
                  for key, values in definition.items()]
        if self._expected is not None:
            params.append(Param(names.SWEEP_EXPECTED_JOBS, str(self._expected)))
        run = None
        # Any error here, a RunError of the store's checks or the server's answer to the first
        # writes, is one line and exit 1: Hydra would take it for a warning and run every job.
        try:
            ensure_store(tracking.uri)  # before any job: parallel jobs then find it ready
            client = MlflowClient(tracking.uri)
            experiment_id = experiment_for(tracking.uri, tracking.experiment)
            run = client.create_run(experiment_id, run_name=self._name, tags=tags)
            client.log_batch(run.info.run_id, params=params)
        except Exception as error:
            from runner.record.server import failure_line
            from runner.terminal.summary import print_failure

            if run is not None:  # no parent left RUNNING for a sweep that never ran
                try:
                    MlflowClient(tracking.uri).delete_run(run.info.run_id)
                except Exception as again:
                    log.debug("could not delete the parent run: %s", again)
            print_failure(f"cannot record in MLflow at tracking.uri={tracking.uri}: "
                          f"{failure_line(tracking.uri, error)}", None)
            sys.exit(1)
        self._client, self._uri = client, tracking.uri
        self._launcher = tags[names.SWEEP_LAUNCHER]
        self._experiment_id, self._parent_run_id = experiment_id, run.info.run_id
        self._jobs_ended = 0
        global _active
        _active = self
        if is_server(tracking.uri):  # records kept while it was not answering, written first
            outage.write_kept(tracking.uri, KEPT_HANDLERS)
        os.environ[PARENT_ENV] = run.info.run_id
        os.environ[PARENT_EXPERIMENT_ENV] = "\n".join(
            (str(tracking.uri), str(tracking.experiment), experiment_id))
        self._started = time.monotonic()
        self._monitor = ProgressMonitor(tracking.uri, experiment_id, run.info.run_id,
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

        if is_server(self._uri) and server_down(self._uri):
            return  # its jobs are in the spool: nothing to read until it answers
        try:
            with holding_signals(self._uri):
                flush_records()  # the jobs' record ends written beside later jobs
                runs = sweep_children(self._client, self._experiment_id, self._parent_run_id)
        except Exception as error:  # a server not answering: its jobs go to the spool
            if not (is_server(self._uri) and not_answering(error)):
                raise
            mark_down(self._uri)
            return
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

    def _settle_slurm_jobs(self, runs: list) -> tuple[bool, Optional[str]]:
        """Once the sweep's Slurm jobs have left the queue: end FAILED, in Slurm's words, the
        runs still RUNNING (killed where they could not record it: SIGKILL after the grace
        time) or ended by Slurm for a cause of its own (a node failure reaches the job as the
        SIGTERM of a cancellation); and say why the jobs with no run never ran (cancelled while
        pending). Returns whether a run changed, and that why."""
        from mlflow.entities import RunTag

        from runner.sweep.slurm import current_queue, follow, not_run_why, orphan_reason

        queue = current_queue()
        follow(None)
        try:
            if self._launcher != "GemmlabSlurmLauncher" or queue is None or queue.poll():
                return False, None  # jobs still queued (an interrupted wait): they may record
        except RunError:  # Slurm does not answer: nothing is known of the jobs
            return False, None
        ended = [run for run in runs if run.info.status == "RUNNING" or (
            _status(run) == "killed"
            and queue.ended_by_slurm(run.data.tags.get(names.SLURM_JOB_ID, "")))]
        for run in ended:
            reason = orphan_reason(queue, run.data.tags.get(names.SLURM_JOB_ID))
            self._client.log_batch(run.info.run_id, tags=[
                RunTag(names.STATUS, "failed"), RunTag(names.FAILURE_REASON, reason)])
            self._client.set_terminated(run.info.run_id, "FAILED")
        recorded = {run.data.tags.get(names.SLURM_JOB_ID) for run in runs}
        return bool(ended), not_run_why(queue, recorded)

    def _close(self, status: str, reason: Optional[str] = None) -> None:
        global _active, _exit_code
        parent, self._parent_run_id = self._parent_run_id, None
        if _active is self:
            _active = None
        self._wall_s = time.monotonic() - self._started
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
        if not is_server(self._uri):
            self._write_end(parent, status, reason)
            return
        # On a server: what the jobs kept in the spool first, then the sweep's end; a server
        # down meanwhile is waited for (a finished sweep only: an interrupted one ends now),
        # and where it stays down the end joins the spool.
        for attempt in (1, 2):
            if server_down(self._uri) and not (status == "FINISHED"
                                                and outage.wait_for_server(self._uri)):
                break
            try:
                outage.write_kept(self._uri, KEPT_HANDLERS)
                return self._write_end(parent, status, reason, check_series=attempt > 1)
            except Exception as error:
                if not not_answering(error):
                    raise
                mark_down(self._uri)
        _exit_code = 1
        outage.keep_end(self._uri, parent, {
            "parent": parent, "experiment_id": self._experiment_id, "name": self._name,
            "expected": self._expected, "wall_s": self._wall_s, "launcher": self._launcher,
            "status": status, "reason": reason})

    def _write_end(self, parent: str, status: str, reason: Optional[str] = None,
                   check_series: bool = False) -> None:
        """Read the sweep's jobs back and write its end on the parent: the summary, the
        series runs (`check_series`: not where an earlier attempt wrote them), the status; then
        print the summary."""
        global _exit_code
        runs = sweep_children(self._client, self._experiment_id, parent)
        settled, not_run_why = self._settle_slurm_jobs(runs)
        if settled or status != "FINISHED" and self._end_orphans(runs, reason or
                                                                 status.lower()):
            runs = sweep_children(self._client, self._experiment_id, parent)
        summary = SweepSummary.of(runs)
        summary.not_run_why = not_run_why
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

                _exit_code = 1  # every job failed before its run opened: nothing recorded
                print_failure("the sweep launched no job, or none could be recorded; nothing "
                              "was recorded", None)
            return
        metrics = {}
        try:
            metrics = self._log_summary(parent, summary, series=status == "FINISHED" and not (
                check_series and self._has_series(parent)))
            if reason:
                self._client.set_tag(parent, names.FAILURE_REASON, reason[:5000])
        finally:
            self._client.set_terminated(parent, status)
        print_sweep_summary(summary, self._expected, self._name, parent, self._uri,
                            metrics.get("overhead_s_per_job"), phases_line(metrics))

    def _has_series(self, parent: str) -> bool:
        """Whether the parent's series runs exist (an earlier attempt at its end wrote them)."""
        return bool(self._client.search_runs(
            [self._experiment_id], f"tags.`{names.PARENT_RUN_ID}` = '{parent}' and "
            f"tags.`{names.SERIES}` = 'true'", max_results=1))

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
        bookkeeping = bookkeeping_of(summary, self._wall_s)
        client.log_batch(parent, tags=[RunTag(f"{names.SWEEP_PREFIX}{key}", tag_value(value))
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
        log_report(client, parent, summary, self._name, self._uri)
        if series:
            log_series(client, self._experiment_id, parent, summary, self._name)
        lines = [f"# {self._name}", "", summary.counts_line(self._expected), ""]
        lines += [f"- {count} × {reason}" for reason, count in summary.reasons.most_common()]
        client.log_text(parent, "\n".join(lines) + "\n", "failures.md")
        table = phases_table(bookkeeping)
        if table:
            client.log_text(parent, table, "phases.md")
        return bookkeeping


def write_kept_end(client, record: dict) -> None:
    """Write a sweep's end kept in the spool (outage.keep_end) once its server answers: the same
    summary, series and status its own process would have written, read from its jobs as they
    are now (their kept records written first: runner/record/spool.py, replay), and printed."""
    sweep = SweepRecorder()
    sweep._client, sweep._uri = client, record["uri"]
    sweep._experiment_id, sweep._name = record["experiment_id"], record["name"]
    sweep._expected, sweep._wall_s = record.get("expected"), float(record.get("wall_s") or 0.0)
    sweep._launcher = record.get("launcher", "?")
    sweep._write_end(record["parent"], record["status"], record.get("reason"),
                     check_series=True)


KEPT_HANDLERS = {spool.SWEEP_END: write_kept_end}  # runner/sweep/outage.py, write_kept
