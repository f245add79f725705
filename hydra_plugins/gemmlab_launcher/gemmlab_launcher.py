"""gemmlab's Hydra launcher: Hydra's basic launcher (one job after another, in this process),
with the batch's CUDA programs compiled ahead of their jobs (runner/sweep/precompile.py) and
each job's inputs, reference and vendor baseline prepared by the worker while this process
sets the job up (runner/run/ahead.py).

Hydra finds launchers only in the `hydra_plugins` namespace package; conf/config.yaml selects
this one (`override hydra/launcher: gemmlab`). Each job's config is composed once, before the
batch starts, and run as the basic launcher runs it: Hydra's basic sweeper composes every job's
config to validate the batch before launching it, and the launcher takes those (a grid sweep
composed each job twice, 0.1-0.2 s a time), each from config files parsed once per process
(runner/sweep/compose_cache.py).
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence

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


class _ComposedOnce:
    """The config loader's `load_sweep_config`, keeping each result until it is asked for
    again with the same overrides (the sweeper's validation, then the launcher): that second
    call takes it, so each config object goes to one job. The first config composed for a
    batch goes to the worker at once (`prepare_first`): it prepares that job while the rest of
    the batch is composed (a grid sweep's validation composes all of it before any job runs)."""

    def __init__(self, load):
        self._load = load
        self._kept: dict = {}
        self._first_sent = False

    def __call__(self, master_config, sweep_overrides):
        key = (id(master_config), tuple(sweep_overrides))
        if key in self._kept:
            return self._kept.pop(key)
        config = self._load(master_config, sweep_overrides)
        self._kept[key] = config
        if not self._first_sent:
            self._first_sent = True
            from runner.job.supervisor import prepare_first
            from runner.sweep.precompile import request_of

            prepare_first(_without_hydra(config), request_of(config, list(sweep_overrides)))
        return config

    def forget(self) -> None:
        self._kept.clear()
        self._first_sent = False


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
        configs = [self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
                   for overrides in job_overrides]
        runs: List[JobReturn] = []
        with Precompiler([request_of(config, overrides)
                          for config, overrides in zip(configs, job_overrides)]):
            try:
                for index, (overrides, sweep_config) in enumerate(zip(job_overrides, configs)):
                    following = configs[index + 1] if index + 1 < len(configs) else None
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
        loader = self.hydra_context.config_loader.load_sweep_config
        if isinstance(loader, _ComposedOnce):
            loader.forget()  # configs composed for this batch and not launched: not needed again
        return runs
