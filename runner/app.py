"""`python -m runner`: compose the config with Hydra, run once, record in MLflow, summarise.

A single run that fails exits non-zero with one line saying why; inside a sweep (`-m`) the
failure is recorded and the sweep goes on with the next job.

The user's input errors (an unknown key, a value out of range, a tiling value or a shape the
kernel refuses, a folder that is not there) are one line before anything is recorded: a single
run records nothing and exits 1 within about a second. In a sweep a point the checks refuse is
still a child run with status `refused`: the sweep's record is the space it covered (its counts,
failures.md, an Optuna trial's result, the resume), and the sweep goes on.

The terminal holds gemmlab's own lines: the run's INFO log lines (the OpenCL device chosen and
why, a size rule applied) go to Hydra's job log (outputs/…/app.log), the size rule also to the
run's `kernel.size_rule` tag.
"""

import logging
import sys
from typing import Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra_plugins.gemmlab_launcher import register as register_launchers
from omegaconf import DictConfig, OmegaConf

from runner.backends import check_device_type
from runner.config.paths import CONF_DIR, source_file_name
from runner.config.preflight import (
    check_kernel_complete,
    check_kernel_dirs,
    check_kernel_name,
    check_resolves,
    check_shape,
    command_line_error,
    kernel_sweep,
    refuse_missing_searchpath,
)
from runner.config.schema import register_configs
from runner.config.size_rules import apply_size_rules, pinned_params
from runner.config.spec import ProblemSize, plan_kernel
from runner.config.validate import validate
from runner.errors import Refused, RunError
from runner.job import supervisor
from runner.job.sanitizers import sanitizer_finding, sanitizer_of
from runner.job.supervisor import run_job
from runner.record import names
from runner.record.resume import KEY_TAG, find_measurement, reuse
from runner.record.server import failure_line, is_server, spool_folder
from runner.record.store import sqlite_path
from runner.record.tracking import Recorder, RecordNotOpened, comparable_params, flush_records
from runner.sweep.context import current_parent_run_id, in_sweep, parent_experiment_id
from runner.sweep.gpu_pool import claim_gpu
from runner.terminal.interrupts import describe, shielded, status_of
from runner.terminal.progress import RelayedBars
from runner.terminal.summary import (
    headline,
    print_cached,
    print_failure,
    print_measured_again,
    print_sanitized,
    print_summary,
    unclean_words,
)

log = logging.getLogger("runner")

register_configs()
register_launchers()  # gemmlab's Hydra launchers (hydra_plugins/gemmlab_launcher)
refuse_missing_searchpath()  # Hydra warns while it composes, after this module is imported


def _rate(metrics: dict) -> Optional[float]:
    return metrics.get(names.GFLOPS) or metrics.get(names.GBPS)


def run(cfg: DictConfig) -> Optional[float]:
    """One recorded run. Returns the median GFLOPS (GB/s for copies), None when it failed
    (0.0 for a clean run under a sanitizer, which times nothing).

    In a sweep with a GPU pool (`hydra/launcher=gpus gpus=N`) the run first claims a GPU of its
    own and runs on it."""
    if cfg.gpus > 0 and in_sweep():
        with claim_gpu(cfg.gpus, HydraConfig.get().job.num) as index:
            cfg.backend.device = index if cfg.backend.name == "cuda" else str(index)
            return _run(cfg)
    return _run(cfg)


def _task_overrides() -> list:
    if not HydraConfig.initialized():
        return []
    # As typed: an interpolation in a value stays text (check_resolves says what is wrong).
    return [str(text) for text in
            OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)]


def _choice(group: str) -> Optional[str]:
    return HydraConfig.get().runtime.choices.get(group) if HydraConfig.initialized() else None


def check_config(cfg: DictConfig, size: ProblemSize) -> None:
    """Every check of the config before a device is opened: the sizes given once and of the
    kernel's rank, the kernel's name, each number in its range, the tiling values against the
    spec, the step's source for this backend, an OpenCL device of the kind asked for. Refused
    (or a RunError for a spec that cannot be read) naming the value and what is allowed."""
    sources = HydraConfig.get().runtime.config_sources if HydraConfig.initialized() else ()
    check_shape(cfg, _choice("shape"), _task_overrides(), sources)
    check_kernel_name(cfg, _choice("kernel"), sources, _task_overrides())
    validate(cfg)
    plan_kernel(cfg.kernel, size)
    source_file_name(cfg.kernel, cfg.backend.name)  # a step without this backend's source
    if sanitizer_of(cfg) != "oclgrind":  # the simulator is the tool's own device choice
        check_device_type(cfg.backend)  # a GPU asked for where there is none


def _run(cfg: DictConfig) -> Optional[float]:
    try:  # before anything is recorded: the run's params are the values it runs with
        check_resolves(cfg)
        size = ProblemSize(cfg.m, cfg.n, cfg.k)
        sources = HydraConfig.get().runtime.config_sources if HydraConfig.initialized() else ()
        check_kernel_complete(cfg, _choice("kernel"), sources)
        check_kernel_dirs(cfg.kernel_dirs)
        size_rule = apply_size_rules(cfg, pinned_params(_task_overrides()))
        if not in_sweep():  # the user's input errors: one line, nothing recorded
            check_config(cfg, size)
    except RunError as error:
        print_failure(str(error), None)
        return None
    if cfg.isolate and not cfg.check.get("sanitizer"):
        supervisor.prestart()  # the worker's imports overlap MLflow's below
    backend_name = cfg.backend.name
    parent_run_id = current_parent_run_id()
    try:
        tiling = " ".join(f"{k}={v}" for k, v in cfg.kernel.params.items())
        recorder = Recorder(cfg.tracking, f"{cfg.kernel.name} {backend_name} "
                                          f"{size.label(cfg.kernel.operation)} {tiling}".strip(),
                            parent_run_id, background=_opens_in_background(cfg),
                            experiment_id=parent_run_id and parent_experiment_id(
                                cfg.tracking.uri, cfg.tracking.experiment),
                            deferred_end=_ends_beside_the_next_job(cfg, parent_run_id),
                            params=comparable_params(cfg))
    except Exception as error:  # nothing can be recorded: say where and why, run nothing
        print_failure(_cannot_record(cfg, error), None)
        return None
    if parent_run_id is None and is_server(cfg.tracking.uri) and recorder.run_id is not None:
        from runner.sync import write_kept

        write_kept(cfg.tracking.uri)  # records kept while the server was away, written now
    try:
        return _recorded_run(cfg, recorder, size, size_rule, parent_run_id)
    except RecordNotOpened as error:  # opened in the background: the job stopped at its key
        print_failure(_cannot_record(cfg, error.error), None)
        return None


def _opens_in_background(cfg: DictConfig) -> bool:
    """A single run into a sqlite store that exists opens its MLflow run while the job's worker
    starts and sets its device up (Recorder, background=True; the worker compiles and times
    only once the run is open). The run is opened first, as before, by a sweep's job (its
    worker is already up, and the sweep's cache needs the run before the job goes on), for a
    store yet to be created (MLflow's schema migrations, under a lock another process may
    hold, take longer than the job's setup: the job starts once its run is recorded, so that a
    Ctrl-C in its kernel does not wait for them to end the run KILLED), on a server (a request
    that hangs stays interruptible), and for a job run in this process (isolate=false), whose
    imports would run beside MLflow's."""
    uri = str(cfg.tracking.uri)
    database = sqlite_path(uri) if uri.startswith("sqlite:") else None
    return (not in_sweep() and database is not None and database.is_file()
            and bool(cfg.isolate or cfg.check.get("sanitizer")))


def _ends_beside_the_next_job(cfg: DictConfig, parent_run_id: Optional[str]) -> bool:
    """A CUDA job of a sweep run one after another by gemmlab's launcher, in this process's
    worker: its record's end is written while the next job's worker runs that job
    (runner/record/tracking.py, _DeferredEnds), or before anything reads the sweep's runs.
    Not on a CPU device (the writes would share its cores with the next job's timing), nor
    under a sanitizer, nor for a job run in this process, nor for another launcher's jobs
    (processes of their own that may end without writing it)."""
    if parent_run_id is None or cfg.backend.name != "cuda" or not cfg.isolate \
            or cfg.check.get("sanitizer") or not HydraConfig.initialized():
        return False
    launcher = OmegaConf.select(HydraConfig.get(), "launcher._target_") or ""
    return str(launcher).endswith(".GemmlabLauncher")


def _cannot_record(cfg: DictConfig, error: BaseException) -> str:
    return (f"cannot record in MLflow at tracking.uri={cfg.tracking.uri}: "
            f"{failure_line(str(cfg.tracking.uri), error)}")


def _recorded_run(cfg: DictConfig, recorder: Recorder, size: ProblemSize,
                  size_rule: Optional[str], parent_run_id: Optional[str]) -> Optional[float]:
    """The run, once its Recorder exists: RecordNotOpened where the Recorder opened in the
    background could not open the MLflow run (nothing recorded: the caller says why)."""
    backend_name = cfg.backend.name

    def where() -> str:  # the run's id: once it is open (every finish() waits for it)
        if recorder.spooled is not None or recorder.run_id is None:  # the server was away
            kept = recorder.spooled or spool_folder(recorder.uri)  # (a deferred end: not yet)
            return (f"{kept}, kept until the MLflow server at {recorder.uri} answers "
                    "(gemmlab sync writes it)")
        return (f"MLflow run {recorder.run_id} (experiment '{cfg.tracking.experiment}') "
                f"in {recorder.uri}")

    earlier = []

    def reuse_earlier(key: Optional[str]) -> bool:
        # The worker compiles and times nothing before this answer: MLflow's run is open (and
        # its import off the CPUs) before the job goes on, or the job stops here.
        recorder.wait()
        if key:
            recorder.tags({KEY_TAG: key})
        if key and parent_run_id and not cfg.get("rerun", False):
            flush_records(key)  # an earlier job's end not yet written may carry this key
            found = find_measurement(recorder.experiment_id, key, recorder.run_id,
                                     reuse_unclean=bool(cfg.get("reuse_unclean", False)))
            earlier.append(found)
            if found.passed_over is not None:  # not clean: measured again, and said why
                recorder.tags({names.NOT_REUSED: found.why_measured_again[:5000]})
            return found.run is not None
        return False

    try:
        recorder.start()  # in the background: the job goes to the worker meanwhile
        recorder.text(OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
        recorder.text(OmegaConf.to_yaml(cfg.kernel, resolve=True), "kernel_spec.yaml")
        if size_rule:
            recorder.tags({names.SIZE_RULE: size_rule[:5000]})
            log.debug("size rule of %s: %s", cfg.kernel.name, size_rule)
        recorder.tags({names.KERNEL: cfg.kernel.name, names.BACKEND: backend_name,
                       names.OPERATION: cfg.kernel.operation.value,
                       names.DEVICE_INDEX: cfg.backend.device})
        check_config(cfg, size)  # in a sweep: a refused point is recorded as such
        plan = plan_kernel(cfg.kernel, size)
        tool = sanitizer_of(cfg)
        if tool:
            recorder.tags({names.SANITIZER: tool})
        result = run_job(cfg, recorder, reuse_earlier, size.label(plan.operation),
                         RelayedBars())
        if result.report:
            recorder.text(result.report, f"sanitizer/{tool}.txt")
        source = source_file_name(cfg.kernel, backend_name)
        finding = sanitizer_finding(tool, result.report, source) if tool and result.report \
            else None
    except RecordNotOpened:  # nothing to record into: the caller says why
        raise
    except RunError as error:  # refused or failed before the worker had the job
        recorder.finish(str(error), status="refused" if isinstance(error, Refused) else None)
        print_failure(str(error), where())
        return None
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM (runner/terminal/interrupts.py)
        reason, status = describe(interrupt), status_of(interrupt)
        recorded = True
        with shielded():  # a run opened in the background is waited for, then ends KILLED
            try:
                recorder.finish(reason, status=status)
            except RecordNotOpened:  # the store could not be opened: nothing to end
                recorded = False
        print_failure(reason, where() if recorded else None,
                      recorded_as="KILLED" if status == "killed" else "FAILED")
        interrupt.reported = True  # the command line exits 128 + signal without another line
        raise
    except BaseException as error:  # a bug: still recorded, then raised
        try:
            recorder.finish(f"{type(error).__name__}: {error}")
        except RecordNotOpened:
            pass  # the bug's own traceback says more than the store's error
        raise
    if finding:
        reason = f"{tool} found errors in {plan.name} at {size.label(plan.operation)}: {finding}"
        recorder.finish(reason)
        print_failure(reason, where())
        return None
    if result.status == "cached":
        metrics, tags = reuse(recorder, earlier[0])
        recorder.finish(status="cached", headline=headline(metrics) + unclean_words(tags))
        print_cached(plan, backend_name, metrics, tags, earlier[0], where())
        return _rate(metrics)
    if result.status != "ok":
        recorder.finish(result.reason, status=None if result.status == "failed"
                        else result.status)
        print_failure(result.reason, where())
        return None
    if tool:
        recorder.finish(headline=f"{tool}: no errors")
        print_sanitized(result.outcome, backend_name, tool, where())
        return 0.0  # verified and clean, but nothing was timed: no rate
    gpu = result.outcome.gpu
    unclean = f" · GPU {gpu.hygiene}" if gpu is not None and gpu.hygiene != "clean" else ""
    host = result.outcome.host
    if host is not None and host.hygiene == "shared":
        unclean += " · host shared"
    recorder.finish(headline=headline(result.outcome.metrics) + unclean)
    print_summary(result.outcome, backend_name, where())
    print_measured_again(earlier[0].why_measured_again if earlier else "")
    return _rate(result.outcome.metrics)


class _RunInfoOffTheConsole(logging.Filter):
    """The run's own INFO lines (logger `runner`: the OpenCL device chosen and why, relayed from
    the worker; a size rule) stay in Hydra's job log file, off the terminal."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "runner" and record.levelno < logging.WARNING)


def _quiet_console() -> None:
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and \
                not isinstance(handler, logging.FileHandler) and \
                not any(isinstance(f, _RunInfoOffTheConsole) for f in handler.filters):
            handler.addFilter(_RunInfoOffTheConsole())


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> Optional[float]:
    _quiet_console()
    result = run(cfg)
    if not in_sweep():
        command_line = sys.modules.get("runner.cli")
        if command_line is not None:  # the run is recorded and printed: exit without teardown
            command_line.single_run_ended()
        if result is None:
            sys.exit(1)
    return result


def main() -> Optional[float]:
    """The Hydra app, after the command line's keys are checked: a key gemmlab does not have
    (`sise=128`, `+sise=128`) is one line with a did-you-mean, before anything is composed."""
    asks = {"--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc"}
    problem = None if asks & set(sys.argv[1:]) else command_line_error(sys.argv[1:])
    if problem is not None:
        print_failure(problem, None)
        sys.exit(1)
    sys.argv[1:] = per_job_kernel_values(sys.argv[1:])
    return _hydra_main()


def per_job_kernel_values(argv: list[str]) -> list[str]:
    """In a sweep over kernels, `kernel.params.TSM=64` (or `kernel.defines.…`) is meant for each
    job's kernel: as a plain override Hydra applies it to the sweep's own config, whose kernel is
    the default one, and stops ("Key 'TSM' is not in struct"). As `choice(64)` it is a sweep
    value of one, applied to each job's composed kernel. A key that some of the swept kernels
    do not have was refused before (preflight.kernel_sweep_error, in command_line_error)."""
    if kernel_sweep(argv) is None:  # `kernel=a,b`, `choice(…)`, `glob(…)` in a multirun
        return argv
    prefixes = ("kernel.params.", "kernel.defines.")
    return [f"{arg.split('=', 1)[0]}=choice({arg.split('=', 1)[1]})"
            if arg.startswith(prefixes) and "=" in arg and "," not in arg
            and "(" not in arg.split("=", 1)[1] else arg
            for arg in argv]
