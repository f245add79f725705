"""Slurm as a sweep's jobs meet it (`hydra/launcher=slurm`, `slurm_cpu`): what the cluster can
give, checked before anything is queued; the sweep's jobs in the queue, with Slurm's reasons;
their cancellation; and, inside a job, how Slurm ends it.

Everything here asks Slurm's own commands (`sinfo`, `squeue`, `scancel`), the same ones a user
types, so that what gemmlab says matches what they see. Accounting (`sacct`) is not assumed: a
cluster without it still answers `squeue` while a job is queued or running.
"""

import os
import re
from collections import Counter
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from runner.errors import Refused, RunError
from runner.job.worker import IGNORES_SIGTERM_ENV
from runner.terminal.interrupts import SlurmEnded

KEY = "hydra.launcher."  # the keys a user changes, as they type them
COMMAND_TIMEOUT_S = 30.0
# Slurm states of a job that ended through no doing of its own (squeue's %T).
ENDED_BY_SLURM = {
    "NODE_FAIL": "its node failed",
    "BOOT_FAIL": "its node failed to boot",
    "PREEMPTED": "it was preempted",
    "OUT_OF_MEMORY": "it ran out of the memory it asked for (hydra.launcher.mem_gb)",
    "DEADLINE": "it passed its deadline",
}


def slurm(*args: str) -> str:
    """The output of one of Slurm's commands, or a RunError in one line."""
    try:
        done = subprocess.run(list(args), capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S)
    except FileNotFoundError:
        raise RunError(f"hydra/launcher=slurm needs Slurm's commands on this host, and `{args[0]}` "
                       f"is not on the PATH; hydra/launcher=submitit_local runs the same jobs "
                       f"here") from None
    except subprocess.TimeoutExpired:
        raise RunError(f"Slurm did not answer `{' '.join(args)}` within "
                       f"{COMMAND_TIMEOUT_S:g} s: is slurmctld up?") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise RunError(f"`{' '.join(args)}` failed: {said[0] if said else done.returncode}")
    return done.stdout


@dataclass
class Partition:
    name: str
    default: bool = False
    time_limit_min: Optional[float] = None  # None: no limit
    nodes: list = field(default_factory=list)  # (name, cpus, memory in MB, GPUs)

    def most(self, index: int) -> int:
        return max((node[index] for node in self.nodes), default=0)


def gpus_of(gres: str) -> int:
    """The GPUs in sinfo's GRES text: `gpu:4`, `gpu:h100:8(S:0-1)`, `gpu:a:2,gpu:b:2`; 0 for
    `(null)`."""
    total = 0
    for item in gres.split(","):
        parts = re.sub(r"\(.*?\)", "", item).split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def minutes_of(limit: str) -> Optional[float]:
    """sinfo's time limit in minutes: `infinite`, `days-hh:mm:ss`, `hh:mm:ss`, `mm:ss`, `mm`."""
    if limit in ("infinite", "UNLIMITED", "n/a", ""):
        return None
    days, _, clock = limit.rpartition("-")
    parts = [int(part) for part in clock.split(":")]
    seconds = {1: lambda p: p[0] * 60, 2: lambda p: p[0] * 60 + p[1],
               3: lambda p: p[0] * 3600 + p[1] * 60 + p[2]}[len(parts)](parts)
    return (int(days or 0) * 86400 + seconds) / 60


def partitions() -> dict[str, Partition]:
    """Every partition and its nodes, from `sinfo`."""
    found: dict[str, Partition] = {}
    for line in slurm("sinfo", "-h", "-N", "-o", "%P|%N|%c|%m|%G|%l").splitlines():
        fields = line.strip().split("|")
        if len(fields) != 6:
            continue
        name, node, cpus, memory, gres, limit = fields
        default = name.endswith("*")
        name = name.rstrip("*")
        partition = found.setdefault(name, Partition(name, default, minutes_of(limit)))
        partition.nodes.append((node, int(cpus.rstrip("+") or 0),
                                int(re.sub(r"\D", "", memory) or 0), gpus_of(gres)))
    return found


def check_request(params: dict) -> str:
    """What the launcher's config asks of each job, against what the partition's nodes have:
    Refused in one line naming the key to change, before anything is queued. Returns the
    partition's name."""
    found = partitions()
    asked = params.get("partition")
    if asked is None:
        defaults = [p for p in found.values() if p.default]
        if not defaults:
            raise Refused(f"Slurm has no default partition: name one, {KEY}partition=… "
                          f"(partitions: {', '.join(sorted(found)) or 'none'})")
        partition = defaults[0]
    elif asked not in found:
        raise Refused(f"Slurm has no partition '{asked}' ({KEY}partition): its partitions are "
                      f"{', '.join(sorted(found)) or 'none'}")
    else:
        partition = found[asked]
    where = f"partition '{partition.name}'"
    tasks = int(params.get("tasks_per_node") or 1)
    gpus = int(params.get("gpus_per_node") or 0) or tasks * int(params.get("gpus_per_task") or 0)
    most_gpus = partition.most(3)
    if gpus and not most_gpus:
        raise Refused(f"the jobs ask for {gpus} GPU{'s' if gpus > 1 else ''} each "
                      f"({KEY}gpus_per_node) and no node of {where} has a GPU: "
                      f"hydra/launcher=slurm_cpu sweeps on CPUs")
    if gpus > most_gpus:
        raise Refused(f"the jobs ask for {gpus} GPUs each ({KEY}gpus_per_node) and the nodes of "
                      f"{where} have at most {most_gpus}")
    cpus = tasks * int(params.get("cpus_per_task") or 1)
    most_cpus = partition.most(1)
    if cpus > most_cpus:
        raise Refused(f"the jobs ask for {cpus} CPUs each ({KEY}cpus_per_task) and the nodes of "
                      f"{where} have at most {most_cpus}: set {KEY}cpus_per_task={most_cpus} "
                      f"or fewer")
    mem_gb = params.get("mem_gb")
    most_mb = partition.most(2)
    if mem_gb and float(mem_gb) * 1024 > most_mb:
        raise Refused(f"the jobs ask for {mem_gb} GB each ({KEY}mem_gb) and the nodes of {where} "
                      f"have at most {most_mb / 1024:.1f} GB: set {KEY}mem_gb="
                      f"{max(1, int(most_mb / 1024))} or less")
    nodes = int(params.get("nodes") or 1)
    if nodes > len(partition.nodes):
        raise Refused(f"the jobs ask for {nodes} nodes each ({KEY}nodes) and {where} has "
                      f"{len(partition.nodes)}")
    limit = partition.time_limit_min
    timeout = params.get("timeout_min")
    if limit is not None and timeout is not None and float(timeout) > limit:
        raise Refused(f"the jobs ask for {timeout} minutes each ({KEY}timeout_min) and {where} "
                      f"allows at most {limit:g}")
    return partition.name


REQUEST_KEYS = ("partition", "tasks_per_node", "gpus_per_node", "gpus_per_task",
                "cpus_per_task", "mem_gb", "nodes", "timeout_min")


def refusal_of(launcher_config) -> Optional[str]:
    """check_request on the sweep's `hydra.launcher` node: the one line to print, or None."""
    from omegaconf import OmegaConf

    params = {key: OmegaConf.select(launcher_config, key) for key in REQUEST_KEYS}
    try:
        check_request(params)
    except RunError as error:
        return str(error)
    return None


def job_name(sweep_name: str) -> str:
    """A Slurm job name for the sweep's jobs: `gemmlab <what was swept>`, printable ASCII."""
    text = re.sub(r"[^\x21-\x7e]+", " ", sweep_name).strip()
    return f"gemmlab {text}"[:200]


@dataclass
class QueuedJob:
    job_id: str  # as squeue writes it: <array>_<task>, or the job's own id
    state: str  # PENDING, RUNNING, COMPLETING, …
    reason: str  # why it is pending, or None
    node: str = ""


# States of a job still queued or running (squeue's %T); any other is how it ended.
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
          "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED",
          "RESV_DEL_HOLD", "SPECIAL_EXIT"}


def queued(job_ids: list) -> dict[str, QueuedJob]:
    """The jobs of `job_ids` (array or job ids) Slurm still knows, one per array task, in any
    state: slurmctld keeps an ended job's state for a while (MinJobAge), which is how its end
    is known without accounting."""
    if not job_ids:
        return {}
    try:
        text = slurm("squeue", "-h", "-r", "-t", "all", "-j", ",".join(job_ids),
                     "-o", "%i|%T|%r|%N")
    except RunError as error:
        if "Invalid job id" in str(error):  # every one of them is forgotten
            return {}
        raise
    jobs = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) == 4:
            for job_id in array_tasks(fields[0]):
                jobs[job_id] = QueuedJob(job_id, *fields[1:])
    return jobs


def array_tasks(job_id: str) -> list[str]:
    """squeue's id of array tasks still held together (`12_[1-3,5%4]`) as one id per task."""
    held = re.fullmatch(r"(\d+)_\[([\d,-]+)(?:%\d+)?\]", job_id)
    if held is None:
        return [job_id]
    tasks = []
    for part in held.group(2).split(","):
        first, _, last = part.partition("-")
        tasks += range(int(first), int(last or first) + 1)
    return [f"{held.group(1)}_{task}" for task in tasks]


class SweepQueue:
    """The sweep's Slurm jobs as the submitting process follows them: polled with `squeue`,
    counted in the progress line, cancelled on Ctrl-C, remembered in the state each was last
    seen in (the node failure that took one, for its run's record)."""

    POLL_S = 2.0

    def __init__(self, array_ids: list, expected: int):
        self.array_ids = list(array_ids)
        self.expected = expected
        self.jobs: dict[str, QueuedJob] = {}
        self.last_seen: dict[str, QueuedJob] = {}
        self._lock = threading.Lock()

    def poll(self) -> dict[str, QueuedJob]:
        """The sweep's jobs still queued or running (each one's latest state is kept)."""
        jobs = queued(self.array_ids)
        with self._lock:
            self.last_seen.update(jobs)
            self.jobs = {job_id: job for job_id, job in jobs.items() if job.state in ACTIVE}
            return dict(self.jobs)

    def line(self) -> str:
        """`Slurm: 1 running, 3 pending (Resources)`: the queue as the progress line shows it."""
        with self._lock:
            jobs = list(self.jobs.values())
        if not jobs:
            return ""
        pending = [job for job in jobs if job.state == "PENDING"]
        parts = []
        if len(jobs) > len(pending):
            parts.append(f"{len(jobs) - len(pending)} running")
        if pending:
            reasons = sorted({job.reason for job in pending if job.reason not in ("None", "")})
            parts.append(f"{len(pending)} pending" + (f" ({', '.join(reasons)})" if reasons
                                                      else ""))
        return "Slurm: " + ", ".join(parts)

    def final_state(self, job_id: str) -> Optional[str]:
        seen = self.last_seen.get(job_id)
        return seen.state if seen is not None else None

    def ended_by_slurm(self, job_id: str) -> Optional[str]:
        """Why Slurm ended a job, where it did (a node failure …), from its last state seen."""
        return ENDED_BY_SLURM.get(self.final_state(job_id) or "")

    def cancel(self) -> str:
        """Cancel every job of the sweep still queued or running; what was cancelled, in words."""
        jobs = self.poll()
        pending = sum(job.state == "PENDING" for job in jobs.values())
        running = len(jobs) - pending
        if jobs:
            slurm("scancel", *self.array_ids)
        arrays = ", ".join(self.array_ids)
        return (f"cancelled the sweep's Slurm jobs (array {arrays}): {running} running, "
                f"{pending} pending")

    def wait_until_gone(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.poll() and time.monotonic() < deadline:
            time.sleep(0.5)


_current: Optional[SweepQueue] = None  # the sweep this process submitted, while it runs


def current_queue() -> Optional[SweepQueue]:
    return _current


def follow(queue: Optional[SweepQueue]) -> None:
    global _current
    _current = queue


# ---------------------------------------------------------------- inside a job

def install_job_signals(timeout_min: Optional[float]) -> None:
    """In a Slurm job's main process, before its run starts: Slurm's SIGTERM (scancel, or the
    time limit) ends the run KILLED or `timeout` in gemmlab's words, where submitit's own
    handler would ignore it; SIGUSR2 (submitit's warning before the limit, which would requeue
    the job) only notes that the limit is near. The job's worker leaves SIGTERM to this
    process."""
    started = time.monotonic()
    limit_s = float(timeout_min) * 60 if timeout_min else None
    warned = []

    def near_limit(signum, frame) -> None:
        warned.append(time.monotonic())

    def terminated(signum, frame) -> None:
        elapsed = time.monotonic() - started
        if limit_s is not None and elapsed >= limit_s - 10:
            raise SlurmEnded("timeout", f"stopped by Slurm at the jobs' time limit of "
                                        f"{timeout_min:g} min ({KEY}timeout_min)")
        raise SlurmEnded("killed", "cancelled by Slurm (scancel, or the sweep's command was "
                                   "interrupted)")

    signal.signal(signal.SIGTERM, terminated)
    signal.signal(signal.SIGUSR2, near_limit)
    os.environ[IGNORES_SIGTERM_ENV] = "1"


def orphan_reason(queue: "SweepQueue", job_id: Optional[str]) -> str:
    """Why a Slurm job's run did not end as its job meant it to, in one line, from the job's
    last state."""
    state = queue.final_state(job_id) if job_id else None
    job = f"job {job_id}" if job_id else "its job"
    why = ENDED_BY_SLURM.get(state or "")
    if why:
        return f"Slurm ended {job}: {why} ({state}); the same command measures it again"
    return (f"Slurm's {job} ended{f' ({state})' if state else ''} without ending its run "
            f"(killed before it could record why); the same command measures it again")


def not_run_why(queue: "SweepQueue", recorded: set) -> Optional[str]:
    """Why the sweep's jobs that recorded no run never ran, from their last states in the
    queue: `Slurm ended them before they started: 2 CANCELLED`; None if every job recorded."""
    states = Counter(job.state for job_id, job in queue.last_seen.items()
                     if job_id not in recorded)
    if not states:
        return None
    return "Slurm ended them before they started: " + ", ".join(
        f"{count} {state}" for state, count in sorted(states.items()))
