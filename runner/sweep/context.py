"""What a job knows of the sweep it is in: whether Hydra runs it in a multirun, and the parent
run and experiment the sweep's process handed it through the environment (inherited by joblib's
workers and submitit's jobs alike; runner/sweep/callback.py sets them when the sweep starts).
Small on purpose: a job imports this, never the sweep's callback."""

import os
from typing import Optional

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

PARENT_ENV = "GEMMLAB_SWEEP_PARENT_RUN_ID"
# The parent's store, experiment name and id, one per line: a job recording into the same
# experiment opens its run there without looking the experiment up again.
PARENT_EXPERIMENT_ENV = "GEMMLAB_SWEEP_EXPERIMENT"


def in_sweep() -> bool:
    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except ValueError:  # called outside Hydra (tests, scripts)
        return False


def current_parent_run_id() -> Optional[str]:
    """The sweep's parent run for a job of a multirun, None for a single run."""
    return os.environ.get(PARENT_ENV) if in_sweep() else None


def parent_experiment_id(uri: str, experiment: str) -> Optional[str]:
    """The id of the sweep's experiment where a job records into it (same store, same name),
    else None (a single run, or a sweep over tracking.experiment)."""
    known = os.environ.get(PARENT_EXPERIMENT_ENV, "").split("\n") if in_sweep() else []
    return known[2] if len(known) == 3 and known[:2] == [str(uri), str(experiment)] else None
