"""`python -m runner`: compose the config with Hydra, run once, record in MLflow, summarise.

A single run that fails exits non-zero with one line saying why; inside a sweep (`-m`) the
failure is recorded and the sweep goes on with the next job.
"""

import logging
import sys
from typing import Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from runner.backends import make_backend
from runner.errors import RunError
from runner.execute import execute
from runner.paths import CONF_DIR
from runner.schema import register_configs
from runner.spec import ProblemSize, plan_kernel
from runner.summary import print_failure, print_summary
from runner.tracking import Recorder, flat_config

log = logging.getLogger("runner")

register_configs()


def _in_sweep() -> bool:
    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except ValueError:  # called outside Hydra (tests)
        return False


def run(cfg: DictConfig) -> Optional[float]:
    """One recorded run. Returns the median GFLOPS (GB/s for copies), None when it failed."""
    size = ProblemSize(cfg.m, cfg.n, cfg.k)
    backend_name = cfg.backend.name
    try:
        recorder = Recorder(cfg.tracking, f"{cfg.kernel.name} {backend_name} "
                                          f"{size.label(cfg.kernel.operation)}")
    except Exception as error:  # nothing can be recorded: say where and why, run nothing
        print_failure(f"cannot record in MLflow at tracking.uri={cfg.tracking.uri}: "
                      f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
                      None)
        return None
    where = (f"MLflow run {recorder.run_id} (experiment '{cfg.tracking.experiment}') "
             f"in {recorder.uri}")
    try:
        params = flat_config(cfg)
        params.update({"M": size.M, "N": size.N, "K": size.K, "dtype": "float32"})
        recorder.params(params)
        recorder.text(OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
        recorder.tags({"gemmlab.kernel": cfg.kernel.name, "gemmlab.backend": backend_name,
                       "gemmlab.operation": cfg.kernel.operation.value})
        plan = plan_kernel(cfg.kernel, size)
        backend = make_backend(cfg.backend)
        selection = getattr(backend, "selection_reason", None)
        if selection:
            log.info("OpenCL device: %s on %s: %s", backend.device_info().name,
                     backend.device_info().platform, selection)
        outcome = execute(cfg, backend, plan, recorder)
    except RunError as error:
        recorder.finish(str(error))
        print_failure(str(error), where)
        return None
    except BaseException as error:  # a bug or an interrupt: still recorded, then raised
        recorder.finish(f"{type(error).__name__}: {error}")
        raise
    recorder.finish()
    print_summary(outcome, backend_name, where)
    metrics = outcome.metrics
    return metrics.get("perf/gflops") or metrics.get("bw/gbps")


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> Optional[float]:
    result = run(cfg)
    if result is None and not _in_sweep():
        sys.exit(1)
    return result
