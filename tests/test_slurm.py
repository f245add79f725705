"""Sweeps on a real one-node Slurm cluster (tests/services.py: munged, slurmctld, slurmd of this
host), recorded on a real `mlflow server`: what the cluster cannot give is refused before
anything is queued, every job records where it ran, and scancel, the time limit, Ctrl-C on the
submitting process and a node failure each end in gemmlab's words. No mock of sbatch, squeue or
the server. Skipped with the reason where Slurm or munge is not installed."""

import hashlib
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from services import PARTITION, SHORT_PARTITION, MlflowServer, OneNodeSlurm

from runner.record import names

QUICK = ["backend.device_type=cpu", "timing.warmup=1"]
# A job that runs for about 15-30 s on a 2-core CPU: long enough to be caught running.
LONG = ["kernel=matmul_1", "timing.repeats=2000", "+rerun=true"]

pytestmark = pytest.mark.skipif(OneNodeSlurm.missing() is not None,
                                reason=OneNodeSlurm.missing() or "")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = OneNodeSlurm(tmp_path_factory.mktemp("slurm")).start()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = MlflowServer(tmp_path_factory.mktemp("mlflow")).start()
    yield started
    started.stop()


@pytest.fixture
def experiment(request) -> str:
    """An experiment of the test's own on the module's server, named so that it needs no
    quoting on the command line."""
    name = re.sub(r"[^A-Za-z0-9_]+", "-", request.node.name)
    digest = hashlib.sha1(request.node.name.encode()).hexdigest()[:8]
    return f"slurm-{name[:60]}-{digest}"


def command(server, experiment: str, *overrides: str, launcher: str = "slurm_cpu") -> list:
    return [sys.executable, "-m", "runner", "-m", f"hydra/launcher={launcher}", *QUICK,
            f"tracking.uri={server.uri}", f"tracking.experiment={experiment}", *overrides]


def start(cluster, cwd: Path, argv: list) -> subprocess.Popen:
    """The sweep's command as a shell in a terminal starts it: SIGINT at its default action."""
    return subprocess.Popen(argv, cwd=cwd, env=cluster.environment(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def run(cluster, cwd: Path, argv: list, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=cluster.environment(), capture_output=True,
                          text=True, timeout=timeout)


def children(server, experiment: str) -> list:
    client = MlflowClient(server.uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    return [run for run in client.search_runs([found.experiment_id])
            if names.SWEEP not in run.data.tags and names.SERIES not in run.data.tags]


def parent(server, experiment: str):
    client = MlflowClient(server.uri)
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id], f"tags.`{names.SWEEP}` = 'true'")
    assert len(runs) == 1
    return runs[0]


def all_jobs(cluster) -> list[str]:
    """Every job slurmctld still knows, in any state: `id state name` lines."""
    done = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T|%j"],
                          env=cluster.environment(), capture_output=True, text=True, timeout=10)
    return done.stdout.strip().splitlines()


def wait_for_running_child(server, experiment: str, timeout_s: float = 120):
    """The first child run RUNNING (opened with its Slurm job's tags): its job is running."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for run in children(server, experiment):
            if run.info.status == "RUNNING" and names.SLURM_JOB_ID in run.data.tags:
                return run
        time.sleep(0.5)
    raise AssertionError("no job of the sweep started running")


def one_error_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("gemmlab: error:")]
    assert len(errors) == 1, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    return errors[0]


@pytest.mark.parametrize("overrides, says", [
    (["launcher=slurm"], "no node of partition 'debug' has a GPU: hydra/launcher=slurm_cpu"),
    (["launcher=slurm", "hydra.launcher.gpus_per_node=0"],
     "ask for 8 CPUs each (hydra.launcher.cpus_per_task) and the nodes of partition 'debug' "
     "have at most"),
    (["hydra.launcher.partition=gpu"], "Slurm has no partition 'gpu' "
                                       "(hydra.launcher.partition): its partitions are debug"),
    (["hydra.launcher.mem_gb=100000"], "(hydra.launcher.mem_gb)"),
    ([f"hydra.launcher.partition={SHORT_PARTITION}"],
     "ask for 60 minutes each (hydra.launcher.timeout_min) and partition 'short' allows at "
     "most 1"),
])
def test_a_request_the_cluster_cannot_give_is_one_line_and_nothing_is_queued(
        cluster, server, experiment, tmp_path, overrides, says):
    launcher = "slurm_cpu"
    if overrides[0].startswith("launcher="):
        launcher, overrides = overrides[0].split("=")[1], overrides[1:]
    before = all_jobs(cluster)
    done = run(cluster, tmp_path, command(server, experiment, "kernel=matmul_1", "size=16,32",
                                          *overrides, launcher=launcher), timeout=120)
    assert done.returncode == 1
    assert says in one_error_line(done.stderr)
    assert all_jobs(cluster) == before  # nothing queued
    assert MlflowClient(server.uri).get_experiment_by_name(experiment) is None or \
        not children(server, experiment)  # nothing recorded


def test_a_sweep_records_each_slurm_job_and_names_it_after_the_sweep(
        cluster, server, experiment, tmp_path):
    argv = command(server, experiment, "kernel=matmul_1,matmul_2", "size=16",
                   "timing.repeats=3")
    done = run(cluster, tmp_path, argv)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2/2 jobs: 2 measured" in done.stdout
    assert "gemmlab: Slurm: " in done.stdout  # the queue, as the jobs went through it
    runs = children(server, experiment)
    assert len(runs) == 2
    typed = "python -m runner " + " ".join(argv[3:])
    for child in runs:
        tags = child.data.tags
        assert child.info.status == "FINISHED"
        assert tags[names.COMMAND] == typed
        assert tags[names.SLURM_NODE] == cluster.node
        assert tags[names.SLURM_PARTITION] == PARTITION
        assert tags[names.SLURM_JOB_ID] == \
            f"{tags[names.SLURM_ARRAY_JOB_ID]}_{tags[names.SLURM_ARRAY_TASK_ID]}"
    array = runs[0].data.tags[names.SLURM_ARRAY_JOB_ID]
    ours = [line.split("|") for line in all_jobs(cluster) if line.startswith(f"{array}_")]
    assert len(ours) == 2
    assert {name for _, _, name in ours} == {"gemmlab kernel=matmul_1,matmul_2 opencl sweep"}


def test_scancel_of_a_running_job_is_recorded_as_cancelled_by_slurm(
        cluster, server, experiment, tmp_path):
    sweep = start(cluster, tmp_path, command(server, experiment, *LONG, "size=256,64"))
    try:
        running = wait_for_running_child(server, experiment)
        job = running.data.tags[names.SLURM_JOB_ID]
        subprocess.run(["scancel", job], env=cluster.environment(), check=True, timeout=10)
        out, err = sweep.communicate(timeout=240)
    finally:
        sweep.kill()
    assert sweep.returncode == 1, err[-3000:]
    assert "Traceback" not in err
    ended = MlflowClient(server.uri).get_run(running.info.run_id)
    assert ended.info.status == "KILLED"
    assert ended.data.tags[names.STATUS] == "killed"
    assert ended.data.tags[names.FAILURE_REASON].startswith("cancelled by Slurm")
    assert "1/2 jobs: 1 measured" in out and ", 1 interrupted;" in out


def test_ctrl_c_on_the_submitting_process_cancels_the_sweeps_jobs(
        cluster, server, experiment, tmp_path):
    sweep = start(cluster, tmp_path, command(server, experiment, *LONG, "size=256,64,96"))
    try:
        running = wait_for_running_child(server, experiment)
        sweep.send_signal(signal.SIGINT)
        out, err = sweep.communicate(timeout=120)
    finally:
        sweep.kill()
    assert sweep.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    array = running.data.tags[names.SLURM_ARRAY_JOB_ID]
    assert f"cancelled the sweep's Slurm jobs (array {array}): 1 running, 2 pending" in out
    states = {line.split("|")[1] for line in all_jobs(cluster) if line.startswith(f"{array}_")}
    assert states == {"CANCELLED"}  # nothing of the sweep left running or queued
    killed = MlflowClient(server.uri).get_run(running.info.run_id)
    assert killed.info.status == "KILLED"
    assert killed.data.tags[names.FAILURE_REASON].startswith("cancelled by Slurm")
    top = parent(server, experiment)
    assert top.info.status == "KILLED"
    assert len(children(server, experiment)) == 1
    assert "interrupted by SIGINT (Ctrl-C): 0/3 jobs: 0 measured" in out, out[-2500:]
    assert ", 1 interrupted; " in out
    assert "2 did not run (Slurm ended them before they started: 2 CANCELLED)" in out


def test_the_time_limit_is_recorded_as_timeout(cluster, server, experiment, tmp_path):
    # Slurm checks time limits about every 30 s: the job runs well past its one minute.
    done = run(cluster, tmp_path, command(server, experiment, "kernel=matmul_1", "size=512",
                                          "timing.repeats=5000", "hydra.launcher.timeout_min=1"),
               timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    (job,) = children(server, experiment)
    assert job.data.tags[names.STATUS] == "timeout", job.data.tags.get(names.FAILURE_REASON)
    assert job.data.tags[names.FAILURE_REASON] == (
        "stopped by Slurm at the jobs' time limit of 1 min (hydra.launcher.timeout_min)")
    assert "1/1 jobs: 0 measured, 0 cached (measured before), 0 refused by constraints or " \
           "limits, 0 failed, 1 timed out" in done.stdout


def test_a_node_failure_is_one_line_in_the_jobs_record(cluster, server, experiment, tmp_path):
    sweep = start(cluster, tmp_path, command(server, experiment, *LONG, "size=256"))
    try:
        running = wait_for_running_child(server, experiment)
        subprocess.run(["scontrol", "update", f"nodename={cluster.node}", "state=down",
                        "reason=gemmlab-test"], env=cluster.environment(), check=True,
                       timeout=10)
        out, err = sweep.communicate(timeout=180)
    finally:
        sweep.kill()
        subprocess.run(["scontrol", "update", f"nodename={cluster.node}", "state=resume"],
                       env=cluster.environment(), capture_output=True, timeout=10)
        cluster._wait_for(cluster._node_idle, 60, "the node to be idle again")
    assert sweep.returncode == 1, err[-3000:]
    assert "Traceback" not in err
    failed = MlflowClient(server.uri).get_run(running.info.run_id)
    assert failed.info.status == "FAILED"
    job = running.data.tags[names.SLURM_JOB_ID]
    assert failed.data.tags[names.FAILURE_REASON] == (
        f"Slurm ended job {job}: its node failed (NODE_FAIL); the same command measures it "
        f"again")
    assert "1/1 jobs: 0 measured, 0 cached (measured before), 0 refused by constraints or " \
           "limits, 1 failed" in out


def test_the_same_command_resumes_what_slurm_did_not_run(cluster, server, experiment,
                                                         tmp_path):
    """The same command again reuses every measurement of the first (status cached)."""
    argv = command(server, experiment, "kernel=matmul_1", "size=16,24", "timing.repeats=3",
                   "reuse_unclean=true")  # reused whatever the load of the node
    first = run(cluster, tmp_path, argv)
    assert first.returncode == 0, first.stderr[-3000:]
    again = run(cluster, tmp_path, argv)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2/2 jobs: 0 measured, 2 cached" in again.stdout
