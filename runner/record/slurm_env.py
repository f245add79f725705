"""What a job run by Slurm records of where and as what it ran, read from its environment."""

import os
from typing import Mapping, Optional

from runner.record import names

# The command the user typed, handed by the submitting process to every job it queues: a job's
# own argv is submitit's (`python -m submitit.core._submit <folder>`).
COMMAND_ENV = "GEMMLAB_COMMAND"


def slurm_job_tags(env: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The Slurm job's id (an array task's as `<array>_<task>`, as squeue shows it), its array,
    node, partition and GPUs; nothing outside Slurm."""
    env = os.environ if env is None else env
    if not env.get("SLURM_JOB_ID"):
        return {}
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    tags = {names.SLURM_JOB_ID: f"{array}_{task}" if array and task else env["SLURM_JOB_ID"],
            names.SLURM_ARRAY_JOB_ID: array, names.SLURM_ARRAY_TASK_ID: task,
            names.SLURM_NODE: env.get("SLURMD_NODENAME"),
            names.SLURM_PARTITION: env.get("SLURM_JOB_PARTITION"),
            names.SLURM_GPUS: env.get("SLURM_JOB_GPUS") or env.get("SLURM_STEP_GPUS")}
    return {key: value for key, value in tags.items() if value}


def typed_command(argv: list) -> str:
    """The command as the user typed it: the one handed down by a submitting process, else
    this process's own."""
    return os.environ.get(COMMAND_ENV) or "python -m runner " + " ".join(argv[1:])
