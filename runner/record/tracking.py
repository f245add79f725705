"""MLflow recording of one run: params, metrics, tags, artifacts, and FAILED with a reason."""

import atexit
import functools
import gc
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Mapping, Optional

from omegaconf import DictConfig, OmegaConf

from runner import __version__
from runner.config.paths import PACKAGE_DIR, checkout_root
from runner.record import names, server, spool
from runner.record.slurm_env import slurm_job_tags, typed_command
from runner.record.store import check_scheme, ensure_store, holding_signals
from runner.config.measurement import check_tolerance
# why upward: the record's own opening is a stage of the job, timed as time_s/record_open
from runner.run.phases import RECORD_OPEN, metric
from runner.terminal.interrupts import describe, shielded


def _quiet_mlflow() -> None:
    # MLflow's first use of a sqlite store logs each schema migration at INFO; MLflow sets its
    # logger's level when imported, so this runs after the import.
    for noisy in ("alembic", "mlflow"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _import_mlflow(uri: str):
    """MLflow, and for a sqlite store its SQLAlchemy store's modules (most of opening a run:
    about 1.4 s of a CPU), imported with the garbage collector held off where this process
    imports them first: their half a million objects are all kept, and a collector scanning
    them as they come takes a fifth of the import. They are then frozen out of the
    collector's later passes, which would each scan them again (0.1 s) for nothing."""
    first = "mlflow" not in sys.modules
    collecting = first and gc.isenabled()
    if collecting:
        gc.disable()
    try:
        import mlflow

        if uri.startswith("sqlite:"):
            import mlflow.store.tracking.sqlalchemy_store
    finally:
        if collecting:
            gc.freeze()
            gc.enable()
    _quiet_mlflow()
    server.quiet_retries(uri)  # a server's outage said in one line, not per retry
    return mlflow


def flatten(node: Any, prefix: str = "") -> dict[str, str]:
    """`{"kernel": {"params": {"TS": 32}}}` -> `{"kernel.params.TS": "32"}`; lists as JSON."""
    flat = {}
    if isinstance(node, Mapping):
        for key, value in node.items():
            flat.update(flatten(value, f"{prefix}{key}."))
    elif isinstance(node, list):
        flat[prefix[:-1]] = json.dumps(node)
    else:
        flat[prefix[:-1]] = "" if node is None else str(node)
    return flat


def flat_config(cfg: DictConfig) -> dict[str, str]:
    container = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    return flatten(container)


def spec_hash(kernel_cfg: DictConfig) -> str:
    """A short hash of the kernel's spec (allowed values, constraints, launches, edges, work)."""
    spec = OmegaConf.to_container(kernel_cfg, resolve=True, enum_to_str=True)
    spec.pop("params", None)  # the values are params of their own; the hash is of the rules
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def comparable_params(cfg: DictConfig) -> dict[str, str]:
    """The knobs a person compares: backend, kernel, each tiling value, sizes, seed, timing.

    The kernel's spec (allowed values, constraints, launches, summary, edges) is not here: it is
    one artifact (kernel_spec.yaml) and the param `kernel.spec_hash`, so that the compare view
    of two runs fits one screen.
    """
    params = flatten(OmegaConf.to_container(cfg.backend, resolve=True, enum_to_str=True),
                     "backend.")
    params[names.KERNEL_NAME] = cfg.kernel.name
    params.update(flatten(OmegaConf.to_container(cfg.kernel.params, resolve=True),
                          names.KERNEL_PARAMS_PREFIX))
    params[names.KERNEL_MAX_REGISTERS] = "" if cfg.kernel.max_registers is None \
        else str(cfg.kernel.max_registers)
    params[names.KERNEL_SPEC_HASH] = spec_hash(cfg.kernel)
    params.update({names.M: str(cfg.m), names.N: str(cfg.n), names.K: str(cfg.k),
                   "dtype": "float32",
                   names.SEED: str(cfg.seed), names.TIMING_WARMUP: str(cfg.timing.warmup),
                   names.TIMING_REPEATS: str(cfg.timing.repeats),
                   "timing.flush_l2": str(cfg.timing.flush_l2),
                   **_adaptive_params(cfg.timing),
                   names.CHECK_TOLERANCE: str(check_tolerance(cfg)),
                   names.KERNEL_PRECISION: _precision(cfg)})
    return params


def _adaptive_params(timing) -> dict[str, str]:
    """The adaptive mode's settings, where it is on (a fixed-count run records none of them)."""
    if timing.get("target_noise") is None:
        return {}
    return {names.TIMING_TARGET_NOISE: str(timing.target_noise),
            names.TIMING_MIN_TIME_S: str(timing.min_time_s),
            names.TIMING_MAX_TIME_S: str(timing.max_time_s)}


def _precision(cfg) -> str:
    precision = cfg.kernel.get("precision", "fp32")
    return str(getattr(precision, "value", precision))


def git_commit(package_dir: Path = PACKAGE_DIR) -> Optional[str]:
    """The commit of the gemmlab checkout the package runs from ("-dirty" with uncommitted
    changes to tracked files); None for an installed wheel.

    Only a work tree whose top level is the checkout holding the package counts: a wheel in a
    venv's site-packages is not that checkout's code even when the venv sits inside it, nor is
    any other repository that happens to contain the package or the working directory.
    GEMMLAB_GIT_COMMIT stands in where the tree travelled without its .git (a lent GPU host).
    """
    if os.environ.get("GEMMLAB_GIT_COMMIT"):
        return os.environ["GEMMLAB_GIT_COMMIT"]
    checkout = checkout_root(package_dir)
    if checkout is None:
        return None

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(checkout), *args], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != checkout.resolve():
            return None  # the checkout's files are untracked in an enclosing repository
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("-dirty" if dirty else "")


HEADLINE_METRICS = (names.GFLOPS, names.GBPS, names.PCT_OF_REFERENCE, names.PCT_OF_VENDOR)


class _DeferredEnds:
    """Sweep jobs' record ends (`Recorder(deferred_end=True)`), written in order by a daemon
    thread while the next job's worker runs it (runner/job/supervisor.py, `relaying`: this
    process then only relays its messages, and the job's timing is the worker's) or whenever
    `flush` asks. Writing a record's metrics, tags, params and artifacts through MLflow's
    SQLAlchemy store was the largest part of a sweep's time between its GPU jobs."""

    def __init__(self):
        self._lock = threading.Lock()
        self._queue: list = []  # (write, args, key), oldest first
        self._changed = threading.Condition(self._lock)
        self._asked = 0  # flushes waiting: write now, relaying or not
        self._writing = False
        self._error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None

    def put(self, write, *args, key: Optional[str] = None) -> None:
        with self._lock:
            self._queue.append((write, args, key))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="gemmlab-record-ends")
                self._thread.start()
                atexit.register(self._flush_at_exit)
            self._changed.notify_all()

    def pending(self) -> bool:
        with self._lock:
            return bool(self._queue) or self._writing

    def flush(self, key: Optional[str] = None) -> None:
        """Return once every record end put so far is written (with `key`: only if one of
        them carries that measurement key, which a lookup is about to search for). Raises the
        first error a write met, once."""
        with self._lock:
            if key is not None and all(queued != key for _, _, queued in self._queue) \
                    and not self._writing:
                return self._raise_error()
            self._asked += 1
            self._changed.notify_all()
            try:
                while self._queue or self._writing:
                    self._changed.wait()
            finally:
                self._asked -= 1
            self._raise_error()

    def _flush_at_exit(self) -> None:
        """What a sweep's end did not write (it writes them all before its summary), written
        before the interpreter ends the daemon thread."""
        try:
            self.flush()
        except Exception as error:
            sys.stderr.write(f"gemmlab: error: a job's record could not be ended: "
                             f"{type(error).__name__}: {error}\n")

    def _raise_error(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self) -> None:
        # why upward: the record's writes wait while the job's worker runs (the GIL is shared)
        from runner.job.supervisor import relaying

        while True:
            with self._lock:
                while not self._queue or not (self._asked or relaying.is_set()):
                    self._changed.wait(0.05)
                write, args, _ = self._queue.pop(0)
                self._writing = True
            try:
                write(*args)
            except BaseException as error:  # said where the store is read next (flush)
                with self._lock:
                    self._error = self._error or error
            finally:
                with self._lock:
                    self._writing = False
                    self._changed.notify_all()


_deferred_ends = _DeferredEnds()


def flush_records(key: Optional[str] = None) -> None:
    """Every deferred record end written (see _DeferredEnds.flush): before this process reads
    the store for its sweep's runs or looks a measurement key up."""
    _deferred_ends.flush(key)


class RecordNotOpened(Exception):
    """The MLflow run of a Recorder opened in the background could not be opened; `error` is
    why (a RunError of the store's checks, or MLflow's own exception)."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


class Recorder:
    """One MLflow run, opened at the start so that every outcome, failures too, is recorded.

    Inside a sweep the run is a child of the sweep's parent run (MLflow's `mlflow.parentRunId`).
    Params go out at once (in the background: with the rest); metrics, tags and artifacts are
    gathered and written together by `finish()`, which every outcome reaches (failures and
    interrupts included): a handful of store transactions per run instead of one per value,
    which is most of a sweep job's cost.

    `deferred_end=True` (a CUDA job of gemmlab's launcher: runner/app.py) opens the run through
    MLflow's client, keeps its params for the end too, and has `finish()` hand the end (status
    and end time as of that moment) to a writer thread (_DeferredEnds), which writes it while
    the next job's worker runs that job or when `flush_records()` asks before the store is read.

    `background=True` (a single run: runner/app.py) prepares the run in a thread from
    `start()`: importing MLflow and opening (or creating) the store take about 1.1 s of a CPU,
    which the job's worker spends meanwhile on its own start and its device's setup. Params are
    then gathered too and go out with the rest in `finish()`. Whatever needs the run waits for
    it: `wait()` (the run's id; the job's measurement key, before which the worker compiles and
    times nothing, so that MLflow's work is off the CPUs by then) and `finish()`, which start
    the run in the caller's thread once the thread is done, or raise RecordNotOpened where the
    store could not be opened. Signals reach the main thread only, never the thread's store
    calls; `finish()` waits for the thread, so an interrupted run ends KILLED as in sync mode.

    On a server (http://) the run goes through MLflow's client, not as a fluent active run;
    where the server does not answer (runner/record/server.py) the job goes on and `finish`
    keeps the whole record in the spool (runner/record/spool.py; `spooled` names the file).
    """

    def __init__(self, tracking_cfg, run_name: str, parent_run_id: Optional[str] = None,
                 background: bool = False, experiment_id: Optional[str] = None,
                 deferred_end: bool = False, params: Optional[Mapping[str, Any]] = None):
        self.run_name = run_name
        self.uri = tracking_cfg.uri
        self.experiment = tracking_cfg.experiment
        self.run = None
        self.run_id: Optional[str] = None
        self.experiment_id: Optional[str] = None
        self.open_s = 0.0  # the seconds opening the run took (in sync mode, writing params too)
        self._tags: dict[str, str] = {}
        # Known before the run opens, so that a run interrupted as it opens still gets them.
        self._unwritten_params: dict[str, str] = {k: str(v) for k, v in (params or {}).items()}
        self._params: dict[str, str] = dict(self._unwritten_params)
        self._metrics: dict[str, float] = {}
        self._texts: dict[str, str] = {}
        self._background = background
        self._deferred_end = deferred_end and not background
        self._opening: Optional[threading.Thread] = None
        # Set by the opening thread as it ends. Waited for rather than the thread joined: a
        # Ctrl-C that interrupts Thread.join marks a running thread stopped (CPython 3.11).
        self._opened = threading.Event()
        self._failure: Optional[BaseException] = None
        self._parent_run_id = parent_run_id
        self._start_tags: dict[str, str] = {}
        # No fluent active run where the end is written elsewhere, or on a server (an outage
        # must not leave one open in this process).
        self._client_mode = self._deferred_end or (server.is_server(self.uri) and not background)
        self._record_id, self._start_time = uuid.uuid4().hex, None  # names.RECORD_ID: spool.py
        self._offline = False  # the server did not answer as the run opened: all to the spool
        self.spooled: Optional[Path] = None  # the spool's file holding this run, once kept there
        if background:
            check_scheme(self.uri)  # at once: no thread for a URI that names no store
            return
        started = time.perf_counter()
        mlflow = self._mlflow = _import_mlflow(self.uri)
        try:
            with holding_signals(self.uri):  # a signal meanwhile is raised once the run is open
                mlflow.set_tracking_uri(tracking_cfg.uri)
                if experiment_id is None:  # else a sweep's job: its parent made both
                    ensure_store(tracking_cfg.uri)  # a server refusing or away: one line, here
                    experiment_id = experiment_for(tracking_cfg.uri, tracking_cfg.experiment)
                    mlflow.set_experiment(experiment_id=experiment_id)
                tags = provenance_tags()
                tags[names.RECORD_ID] = self._record_id
                if parent_run_id:
                    tags[names.PARENT_RUN_ID] = parent_run_id
                if self._client_mode:  # no fluent active run: its end is written by finish
                    self._open_through_client(experiment_id, tags)
                else:
                    self.run = mlflow.start_run(experiment_id=experiment_id, run_name=run_name,
                                                tags=tags)
                    if self._unwritten_params:  # at once, as params() writes them
                        mlflow.log_params(self._unwritten_params)
                        self._unwritten_params = {}
        except KeyboardInterrupt as interrupt:  # the run was opened: it ends KILLED, not RUNNING
            if self.run is not None or self._offline:
                self.run_id = self.run.info.run_id if self.run is not None else None
                self.finish(describe(interrupt), status="killed")
            raise
        if self.run is not None:
            self.run_id = self.run.info.run_id
            self.experiment_id = self.run.info.experiment_id
        self.open_s = time.perf_counter() - started

    def _open_through_client(self, experiment_id: Optional[str], tags: dict) -> None:
        """Open the run with MLflow's client (its context tags kept for the spool's record);
        where the server does not answer (server.attempt), the run goes on offline."""
        from mlflow.tracking.context import registry as context_registry

        self._start_tags = context_registry.resolve_tags(tags)
        self._start_time = int(time.time() * 1000)
        self.experiment_id = experiment_id

        def create() -> None:
            self.run = self._mlflow.MlflowClient().create_run(
                experiment_id, start_time=self._start_time, tags=self._start_tags,
                run_name=self.run_name)
        self._offline = not server.attempt(self.uri, create)
        if self.run is not None and self._unwritten_params and not self._deferred_end:
            self._log_params(dict(self._unwritten_params))  # at once, as params() does

    def _log_params(self, params: Mapping[str, str]) -> None:
        """Params written now through the client (kept for `finish` if the server is away)."""
        from mlflow.entities import Param

        if server.attempt(self.uri, self._mlflow.MlflowClient().log_batch, self.run_id or
                          self.run.info.run_id, params=[Param(k, v) for k, v in params.items()]):
            for key in list(params):
                self._unwritten_params.pop(key, None)
        else:
            self._unwritten_params.update(params)

    def _open_in_background(self) -> None:
        """The opening thread: MLflow imported, the store opened (created, upgraded), the
        experiment found or made, the provenance tags and MLflow's own context tags (the
        commit, through GitPython) looked up, all of it ready for `wait()` to start the run in
        the caller's thread, as the fluent API's active run (mlflow.last_active_run() and
        end_run() are per thread), with one store write."""
        started = time.perf_counter()
        try:
            mlflow = self._mlflow = _import_mlflow(self.uri)
            from mlflow.tracking.context import registry as context_registry

            ensure_store(self.uri)
            mlflow.set_tracking_uri(self.uri)
            self.experiment_id = experiment_for(self.uri, self.experiment)
            mlflow.set_experiment(experiment_id=self.experiment_id)
            tags = provenance_tags()
            tags[names.RECORD_ID] = self._record_id
            if self._parent_run_id:
                tags[names.PARENT_RUN_ID] = self._parent_run_id
            context_registry.resolve_tags(tags)  # looked up once here; start_run's is cached
            self._start_tags = tags
        except BaseException as error:  # said by the caller's thread, where it waits
            self._failure = error
        finally:
            self.open_s = time.perf_counter() - started
            self._opened.set()

    def start(self) -> None:
        """Start opening the run in the background (once; nothing in sync mode, where the
        constructor opened it). The caller holds the Recorder before the thread exists, so that
        a Ctrl-C at any moment after this call finds a run to end KILLED (`finish`)."""
        if self._background and self._opening is None:
            with shielded():  # started whole or not at all: a Ctrl-C meanwhile comes after
                opening = threading.Thread(target=self._open_in_background, daemon=True,
                                           name="gemmlab-recorder-open")
                opening.start()
                self._opening = opening

    def wait(self) -> None:
        """Return once the run is open (at once where the constructor opened it): in the
        background, once the thread is done (started here if `start` was not), the run started
        in this thread. RecordNotOpened where it could not be. Ctrl-C interrupts the wait, not
        the opening, which `finish` then waits for; one that comes while the run is started is
        raised once it is (as in the constructor)."""
        if self._background and self.run is None and self._failure is None:
            self.start()
            self._opened.wait()
            if self._failure is None:
                started = time.perf_counter()
                try:
                    with holding_signals(self.uri):
                        run = self._mlflow.start_run(experiment_id=self.experiment_id,
                                                     run_name=self.run_name,
                                                     tags=self._start_tags)
                        self.run, self.run_id = run, run.info.run_id
                except Exception as error:
                    self._failure = error
                finally:
                    self.open_s += time.perf_counter() - started
        if self._failure is not None:
            raise RecordNotOpened(self._failure) from self._failure

    def params(self, params: Mapping[str, Any]) -> None:
        params = {k: str(v) for k, v in params.items()}
        if self._background or self._deferred_end or self._offline:
            self._unwritten_params.update(params)
        else:
            started = time.perf_counter()
            with holding_signals(self.uri):
                (self._log_params if self._client_mode else self._mlflow.log_params)(params)
            self.open_s += time.perf_counter() - started
        self._params.update(params)

    def tags(self, tags: Mapping[str, Any]) -> None:
        self._tags.update({k: str(v) for k, v in tags.items() if v is not None})

    def metrics(self, metrics: Mapping[str, Optional[float]]) -> None:
        self._metrics.update({k: float(v) for k, v in metrics.items() if v is not None})

    def text(self, text: str, artifact_path: str) -> None:
        self._texts[artifact_path] = text

    def _ordered_metrics(self) -> list:
        # The UI's compare view plots the first metric the runs share: make it the rate.
        return sorted(self._metrics.items(), key=lambda item: HEADLINE_METRICS.index(item[0])
                      if item[0] in HEADLINE_METRICS else len(HEADLINE_METRICS))

    def _flush(self, now: Optional[int] = None) -> None:
        from mlflow.entities import Metric, Param, RunTag

        now = now or int(time.time() * 1000)
        client = self._mlflow.MlflowClient()
        client.log_batch(
            self.run_id, metrics=[Metric(k, v, now, 0) for k, v in self._ordered_metrics()],
            params=[Param(k, v) for k, v in self._unwritten_params.items()],
            tags=[RunTag(k, v) for k, v in self._tags.items()])
        self._unwritten_params = {}
        if self._texts:
            with tempfile.TemporaryDirectory() as folder:
                for artifact_path, text in self._texts.items():
                    target = Path(folder, artifact_path)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(text)
                client.log_artifacts(self.run_id, folder)

    def _write_end(self, ended: str, now: int) -> None:
        """The end of a run opened through the client (`deferred_end`, or on a server): what
        `finish` gathered, and the run's status and end time as of `finish`. Where the server
        does not answer, the whole record is kept in the spool instead (`spooled`)."""
        if self._offline or not server.attempt(self.uri, self._end_through_client, ended, now):
            self.spooled = spool.keep_run(self.uri, self._record_id, {
                "run_id": self.run_id, "experiment_id": self.experiment_id,
                "run_name": self.run_name, "start_time": self._start_time, "end_time": now,
                "status": ended, "start_tags": self._start_tags, "params": self._params,
                "metrics": self._ordered_metrics(), "metric_time": now, "tags": self._tags,
                "texts": self._texts})

    def _end_through_client(self, ended: str, now: int) -> None:
        try:
            self._flush(now)
        except BaseException as error:  # the run ends, even without its values (unless away)
            if not server.not_answering(error):
                self._mlflow.MlflowClient().set_terminated(self.run_id, ended, end_time=now)
            raise
        self._mlflow.MlflowClient().set_terminated(self.run_id, ended, end_time=now)

    def finish(self, failure: Optional[str] = None, status: Optional[str] = None,
               headline: str = "") -> None:
        """FINISHED (status `ok`, or `cached` for a reused measurement), FAILED with the
        reason (status `failed`, or `refused` for a configuration refused before compiling), or
        KILLED with the reason (status `killed`: interrupted by a signal).
        The run name leads with the kernel and size, then the result read from what was
        recorded (`397,645 GFLOPS · 98% cuBLAS TF32`: the rate and its % of the library of the
        step's own precision), or the status, or `headline` where no rate was recorded (a
        sanitizer's verdict), then backend and tiling (runner/results/records.py, run_title).
        A run opened in the background is waited for (RecordNotOpened where it could not be)."""
        # Pure helpers on names (no MLflow, no pipeline): the same words the pages read back.
        from runner.results.records import headline_of, run_title

        self.wait()
        # How long opening the run took (a reused measurement keeps the one it copied).
        self._metrics.setdefault(metric(RECORD_OPEN), self.open_s)
        if failure is None:
            self.tags({names.STATUS: status or "ok"})
        else:
            self.tags({names.STATUS: status or "failed", names.FAILURE_REASON: failure})
        outcome = (headline_of(self._metrics, self._tags, self._params) or headline
                   if failure is None else (status or "failed"))
        if status == "cached":
            outcome += " (cached)"
        title = run_title(self._params, self._tags, outcome)
        if title is None and outcome:  # nothing recorded yet but the name given at the start
            title = f"{outcome} · {self.run_name}"
        if title:
            self.tags({names.RUN_NAME: title[:250]})
        ended = ("FINISHED" if failure is None else "KILLED" if status == "killed"
                 else "FAILED")
        if self._deferred_end:
            _deferred_ends.put(self._write_end, ended, int(time.time() * 1000),
                               key=self._tags.get(names.MEASUREMENT_KEY))
            return
        if self._client_mode:  # on a server: written now, or kept in the spool
            self._write_end(ended, int(time.time() * 1000))
            return
        with holding_signals(self.uri):
            try:
                self._flush()
            finally:
                self._mlflow.end_run(status=ended)


@functools.lru_cache(maxsize=1)
def _commit_of_this_process() -> Optional[str]:
    return git_commit()


# MLflow 3's UI opens an experiment of unknown kind on its GenAI traces overview; this kind
# opens it on the runs table, where the run names carry the rate and % of the vendor library.
EXPERIMENT_KIND = {names.EXPERIMENT_KIND: "custom_model_development"}


def artifact_location(uri: str) -> Optional[str]:
    """Where a new experiment of a sqlite store keeps its artifacts: `mlartifacts/` beside the
    database file, so that copying the store's folder keeps them (MLflow's default is ./mlruns
    of whatever directory the command ran in). None for other stores (a server decides)."""
    if not uri.startswith("sqlite:///") or uri in ("sqlite:///", "sqlite:///:memory:"):
        return None
    database = Path(uri[len("sqlite:///"):].split("?", 1)[0])
    return (database.resolve().parent / "mlartifacts").as_uri()


def experiment_for(uri: str, name: str) -> str:
    """The id of the experiment `name`, created (as a runs experiment, its artifacts beside a
    sqlite store) when it does not exist."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_location(uri),
                                         tags=EXPERIMENT_KIND)
    except MlflowException:  # a parallel job created it first
        return client.get_experiment_by_name(name).experiment_id


def provenance_tags() -> dict[str, str]:
    """Runner version, commit and the command as typed (for a sweep, the sweep's command)."""
    tags = {names.RUNNER_VERSION: __version__, names.COMMAND: typed_command(sys.argv),
            **slurm_job_tags()}
    commit = _commit_of_this_process()
    if commit:
        tags[names.GIT_COMMIT] = commit
    return tags
