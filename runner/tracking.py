"""MLflow recording of one run: params, metrics, tags, artifacts, and FAILED with a reason."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Optional

from omegaconf import DictConfig, OmegaConf

from runner import __version__
from runner.paths import PACKAGE_DIR, checkout_root



def _quiet_mlflow() -> None:
    # MLflow's first use of a sqlite store logs each schema migration at INFO; MLflow sets its
    # logger's level when imported, so this runs after the import.
    for noisy in ("alembic", "mlflow"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


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


class Recorder:
    """One MLflow run, opened at the start so that every outcome, failures too, is recorded."""

    def __init__(self, tracking_cfg, run_name: str):
        import mlflow

        _quiet_mlflow()
        self._mlflow = mlflow
        mlflow.set_tracking_uri(tracking_cfg.uri)
        mlflow.set_experiment(tracking_cfg.experiment)
        self.run = mlflow.start_run(run_name=run_name)
        self.run_id = self.run.info.run_id
        self.experiment_id = self.run.info.experiment_id
        self.uri = tracking_cfg.uri
        tags = {"gemmlab.runner_version": __version__,
                # The command as typed (for a sweep, the sweep's command): pages quote it.
                "gemmlab.command": "python -m runner " + " ".join(sys.argv[1:])}
        commit = git_commit()
        if commit:
            tags["gemmlab.git_commit"] = commit
        self.tags(tags)

    def params(self, params: Mapping[str, Any]) -> None:
        self._mlflow.log_params({k: str(v) for k, v in params.items()})

    def tags(self, tags: Mapping[str, Any]) -> None:
        self._mlflow.set_tags({k: str(v) for k, v in tags.items() if v is not None})

    def metrics(self, metrics: Mapping[str, Optional[float]]) -> None:
        present = {k: float(v) for k, v in metrics.items() if v is not None}
        if present:
            self._mlflow.log_metrics(present)

    def text(self, text: str, artifact_path: str) -> None:
        self._mlflow.log_text(text, artifact_path)

    def finish(self, failure: Optional[str] = None) -> None:
        if failure is None:
            self.tags({"gemmlab.status": "ok"})
            self._mlflow.end_run(status="FINISHED")
        else:
            self.tags({"gemmlab.status": "failed", "failure_reason": failure})
            self._mlflow.end_run(status="FAILED")
