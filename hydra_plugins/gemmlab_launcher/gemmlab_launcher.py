"""gemmlab's Hydra launcher: Hydra's basic launcher (one job after another, in this process),
with the batch's CUDA programs compiled ahead of their jobs (runner/sweep/precompile.py) and
each job's inputs, reference and vendor baseline prepared by the worker while this process
sets the job up (runner/run/ahead.py).

Hydra finds launchers only in the `hydra_plugins` namespace package; conf/config.yaml selects
this one (`override hydra/launcher: gemmlab`). Each job's config is composed once and run as the
basic launcher runs it, from config files parsed once per process
(runner/sweep/compose_cache.py). Hydra's basic sweeper composes every job's config to validate
the batch before launching it (0.05-0.1 s a job), and the launcher takes those. In a CUDA batch
only the first is composed then: the others are composed in a thread while a job's worker runs
it (the GPU does the job's work; this process waits for it), each handed to the compile pool as
it comes, so the first job starts a second or more earlier in a 20-job sweep. A config that
cannot be composed then ends the sweep with Hydra's error before the next job starts; the jobs
already run stay recorded. An OpenCL batch, whose jobs may time the CPU's cores, is composed
whole before it starts, as Hydra does.
"""

import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra.core.config_store import ConfigStore
from hydra.core.utils import (
    JobReturn,
    configure_log,
    filter_overrides,
    run_job,
    setup_globals,
)
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)


@dataclass
class GemmlabLauncherConf:
    _target_: str = "hydra_plugins.gemmlab_launcher.gemmlab_launcher.GemmlabLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="gemmlab", node=GemmlabLauncherConf,
                             provider="gemmlab")


class _ComposingThread:
    """Composes configs in order in a daemon thread, each only while this process waits: for
    a job's worker (runner/job/supervisor.py, `relaying`) or for that very config (`result`).
    Composing beside this process's own work (a job's MLflow record opening) slowed that work
    more than it saved."""

    def __init__(self, load):
        self._load = load
        self._work: queue.Queue = queue.Queue()
        self._stopped = False
        self._waiting = threading.Event()  # the launcher waits for a config
        self.on_composed: Optional[Callable] = None
        threading.Thread(target=self._run, name="gemmlab-compose", daemon=True).start()

    def submit(self, master_config, sweep_overrides: list) -> Future:
        future: Future = Future()
        self._work.put((future, master_config, sweep_overrides))
        return future

    def result(self, future: Future):
        """The config, composed at once if it has not been yet."""
        self._waiting.set()
        try:
            return future.result()
        finally:
            self._waiting.clear()

    def stop(self) -> None:
        self._stopped = True
        self._work.put(None)

    def _may_compose(self) -> bool:
        from runner.job.supervisor import relaying

        while not self._stopped:
            if self._waiting.is_set() or relaying.wait(0.05):
                return True
        return False

    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item is None or not self._may_compose():
                return
            future, master_config, sweep_overrides = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                config = self._load(master_config, sweep_overrides)
                if self.on_composed is not None:
                    self.on_composed(config, sweep_overrides)
            except BaseException as error:  # the launcher raises it, as Hydra's validation would
                future.set_exception(error)
            else:
                future.set_result(config)


class _ComposedOnce:
    """The config loader's `load_sweep_config`, keeping each result until it is asked for
    again with the same overrides (the sweeper's validation, then the launcher): that second
    call takes it, so each config object goes to one job. The first config composed for a
    batch goes to the worker at once (`prepare_first`): it prepares that job while the rest of
    the batch is composed. Where that first job runs on CUDA, the validation's later calls are
    composed by a `_ComposingThread` while the jobs run, and the launcher's call waits for
    them; the validation, which discards what it gets, gets None for them."""

    def __init__(self, load):
        self._load = load
        self._kept: dict = {}
        self._first_sent = False
        self._later: Optional[_ComposingThread] = None
        self._launching = False  # from the launcher's first call: every miss composed at once

    def __call__(self, master_config, sweep_overrides):
        key = (id(master_config), tuple(sweep_overrides))
        if key in self._kept:
            kept = self._kept.pop(key)
            if isinstance(kept, Future):
                assert self._later is not None
                return self._later.result(kept)
            return kept
        if self._later is not None and not self._launching:
            self._kept[key] = self._later.submit(master_config, list(sweep_overrides))
            return None
        config = self._load(master_config, sweep_overrides)
        self._kept[key] = config
        if not self._first_sent:
            self._first_sent = True
            from runner.job.supervisor import prepare_first
            from runner.sweep.precompile import request_of

            prepare_first(_without_hydra(config), request_of(config, list(sweep_overrides)))
            if config.backend.name == "cuda":
                self._later = _ComposingThread(self._load)
        return config

    def composing(self) -> bool:
        """Whether this batch's later configs are composed in the background."""
        return self._later is not None

    def launching(self, on_composed: Optional[Callable] = None) -> None:
        """The launcher's calls begin: a config not kept is composed at once, in its thread.
        `on_composed(config, overrides)` is called in the composing thread for each config it
        composes from now on (the compile pool's requests)."""
        self._launching = True
        if self._later is not None:
            self._later.on_composed = on_composed

    def pending(self, master_config, sweep_overrides) -> Optional[Future]:
        kept = self._kept.get((id(master_config), tuple(sweep_overrides)))
        return kept if isinstance(kept, Future) else None

    def failure(self, master_config, jobs: Sequence[Sequence[str]]) -> Optional[BaseException]:
        """The first error among these jobs' compositions that have ended, in job order."""
        for overrides in jobs:
            kept = self.pending(master_config, overrides)
            if kept is not None and kept.done() and not kept.cancelled() \
                    and kept.exception() is not None:
                return kept.exception()
        return None

    def forget(self) -> None:
        if self._later is not None:  # a composition under way ends on its own, unused
            self._later.stop()
        self._kept.clear()
        self._first_sent = False
        self._later, self._launching = None, False


def _without_hydra(config: DictConfig) -> DictConfig:
    """A composed job config as its run gets it (Hydra's run_job takes the `hydra` node out)."""
    return OmegaConf.masked_copy(config, [key for key in config if key != "hydra"])


class GemmlabLauncher(BasicLauncher):
    def setup(self, *, hydra_context, task_function, config) -> None:
        from runner.sweep import compose_cache

        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        compose_cache.install()
        loader = hydra_context.config_loader
        if not isinstance(loader.load_sweep_config, _ComposedOnce):
            loader.load_sweep_config = _ComposedOnce(loader.load_sweep_config)

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        from runner.job.supervisor import expect_next
        from runner.sweep.precompile import Precompiler, request_of

        setup_globals()
        assert self.hydra_context is not None and self.config is not None
        assert self.task_function is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs locally")
        loader = self.hydra_context.config_loader.load_sweep_config
        composed = isinstance(loader, _ComposedOnce)
        background = composed and loader.composing()
        jobs = [list(overrides) for overrides in job_overrides]
        if composed:
            loader.launching()
        first = loader(self.config, jobs[0]) if jobs else None
        configs: list = [first] + [None] * (len(jobs) - 1)

        def config_of(index: int):
            if configs[index] is None:
                configs[index] = loader(self.config, jobs[index])
            return configs[index]

        runs: List[JobReturn] = []
        try:
            if background:
                # Nothing was composed yet (the thread waits for a job's worker): each config
                # reaches the pool through this.
                pool = Precompiler([request_of(first, jobs[0])] if jobs else [])
                loader.launching(lambda config, overrides: pool.submit(
                    request_of(config, overrides)))
            else:
                pool = Precompiler([request_of(config_of(index), overrides)
                                    for index, overrides in enumerate(jobs)])
            with pool:
                for index, overrides in enumerate(jobs):
                    failed = background and loader.failure(self.config, jobs[index + 1:])
                    if failed:  # as the validation would have raised it, before this job
                        raise failed
                    sweep_config = config_of(index)
                    # The next config now: it goes to the worker as this job ends, and one
                    # that cannot be composed ends the sweep before this job starts.
                    following = config_of(index + 1) if index + 1 < len(jobs) else None
                    expect_next(None if following is None else _without_hydra(following))
                    index += initial_job_idx
                    log.info(f"\t#{index} : {' '.join(filter_overrides(overrides))}")
                    with open_dict(sweep_config):
                        sweep_config.hydra.job.id = index
                        sweep_config.hydra.job.num = index
                    runs.append(run_job(hydra_context=self.hydra_context,
                                        task_function=self.task_function, config=sweep_config,
                                        job_dir_key="hydra.sweep.dir",
                                        job_subdir_key="hydra.sweep.subdir"))
                    configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        finally:
            expect_next(None)
            if composed:
                loader.forget()  # configs composed for this batch and not launched: not needed
        return runs
