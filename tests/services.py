"""Real services for the tests, started and stopped by the test that needs them, by PID.

- `OneNodeSlurm`: a one-node Slurm cluster of this host (Debian's `slurm-wlm` and `munge`): its
  own munge key and socket, a generated `slurm.conf` (this host as the one node, at 127.0.0.1,
  with this machine's CPUs and memory, partition `debug`), `munged`, `slurmctld -D` and
  `slurmd -D` in the foreground as this process's children, everything in one folder.
  `SLURM_CONF` in `environment()` points Slurm's commands (and submitit's) at it.
- `MlflowServer`: `mlflow server` on loopback over a sqlite store of its own, optionally with
  MLflow's basic authentication (`--app-name basic-auth`); it can be stopped and started again
  on the same port and store, as an outage would.

Each stops exactly what it started: the process group of the PID it spawned (the group holds a
server's workers), SIGTERM then SIGKILL. Where a binary is absent, `missing()` says which, and the
tests skip with that reason.

For a person (docs/clusters.md): `python tests/services.py slurm` runs the one-node cluster in
the foreground and prints the `export SLURM_CONF=…` line to use it; `python tests/services.py
mlflow` does the same for a server; Ctrl-C stops them.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel")
PARTITION = "debug"
SHORT_PARTITION = "short"  # jobs of at most a minute


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop_group(process: Optional[subprocess.Popen], grace_s: float = 10.0) -> None:
    """Stop the process this module started and its group (started with a session of its own,
    so the group's id is its PID): SIGTERM, then SIGKILL after `grace_s`."""
    if process is None or process.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _end_with_parent() -> None:
    """In the child, before exec: Linux sends it SIGTERM when the thread that started it ends,
    so a test run killed before its fixtures' teardown leaves no daemon behind. Only for a
    process started by the main thread (`_spawn`): one started by a test's helper thread (a
    server restarted after an outage) would die with that thread."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _spawn(command: list[str], log: Path, env: Optional[dict] = None) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                preexec_fn=_end_with_parent if threading.current_thread()
                                is threading.main_thread() else None)


def _memory_mb() -> int:
    with open("/proc/meminfo") as info:
        for line in info:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024 - 1024  # leave the system some
    return 2048


class OneNodeSlurm:
    """A Slurm cluster of one node, this host, in `folder`. `start()` returns once `sinfo` shows
    the node idle and a job step runs; `stop()` ends the three daemons by their PIDs."""

    def __init__(self, folder: Path, cpus: Optional[int] = None):
        self.folder = Path(folder)
        self.cpus = cpus or os.cpu_count() or 1
        self.memory_mb = _memory_mb()
        self.node = socket.gethostname().split(".")[0]
        self.conf = self.folder / "slurm.conf"
        self.processes: dict[str, subprocess.Popen] = {}

    @staticmethod
    def missing() -> Optional[str]:
        absent = [name for name in SLURM_BINARIES if shutil.which(name) is None]
        if absent:
            return (f"Slurm or munge not installed ({', '.join(absent)} not found; "
                    f"apt-get install slurm-wlm munge)")
        if os.geteuid() != 0:
            return "the one-node Slurm cluster runs its daemons as root"
        return None

    def environment(self, base: Optional[dict] = None) -> dict:
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        return env

    def _write_conf(self) -> None:
        f = self.folder
        ctld_port, d_port = free_port(), free_port()
        self.conf.write_text(f"""\
ClusterName=gemmlab
SlurmctldHost={self.node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={f}/munge/socket
CredType=cred/munge
StateSaveLocation={f}/state
SlurmdSpoolDir={f}/spool
SlurmctldPidFile={f}/slurmctld.pid
SlurmdPidFile={f}/slurmd.pid
SlurmctldLogFile={f}/log/slurmctld.log
SlurmdLogFile={f}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
MpiDefault=none
ReturnToService=2
KillWait=5
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.memory_mb} State=UNKNOWN
PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName={SHORT_PARTITION} Nodes=ALL MaxTime=1 State=UP
""")

    def start(self, timeout_s: float = 60.0) -> "OneNodeSlurm":
        try:
            return self._start(timeout_s)
        except BaseException:
            self.stop()  # what was started, by PID
            raise

    def _start(self, timeout_s: float) -> "OneNodeSlurm":
        f = self.folder
        for sub in ("state", "spool", "log", "munge"):
            (f / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(f / "munge", 0o700)
        key = f / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        self._write_conf()
        self.processes["munged"] = _spawn(
            ["munged", "--foreground", "--force", f"--socket={f}/munge/socket",
             f"--key-file={key}", f"--log-file={f}/log/munged.log",
             f"--pid-file={f}/munge/munged.pid", f"--seed-file={f}/munge/seed"],
            f / "log" / "munged.out")
        self._wait_for(lambda: (f / "munge" / "socket").exists(), 15, "munged's socket")
        env = self.environment()
        # -i: ignore state left by an earlier cluster in this folder
        self.processes["slurmctld"] = _spawn(["slurmctld", "-D", "-i"],
                                             f / "log" / "slurmctld.out", env)
        self.processes["slurmd"] = _spawn(["slurmd", "-D"], f / "log" / "slurmd.out", env)
        self._wait_for(self._node_idle, timeout_s, "the node to be idle in sinfo")
        return self

    def _node_idle(self) -> bool:
        answer = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True,
                                text=True, env=self.environment(), timeout=10)
        states = answer.stdout.split()  # one line per partition the node is in
        return answer.returncode == 0 and bool(states) and set(states) == {"idle"}

    def _wait_for(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited ({process.returncode}) waiting for "
                                       f"{what}:\n{self.logs()}")
            try:
                if ready():
                    return
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"timed out waiting for {what}:\n{self.logs()}")

    def logs(self, lines: int = 20) -> str:
        out = []
        for log in sorted((self.folder / "log").glob("*")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(out)

    def queue(self) -> list[str]:
        """Every job Slurm still holds, as `id state name` lines."""
        answer = subprocess.run(["squeue", "-h", "-o", "%i %T %j"], capture_output=True,
                                text=True, env=self.environment(), timeout=10)
        return [line for line in answer.stdout.splitlines() if line.strip()]

    def cancel_all(self) -> None:
        for partition in (PARTITION, SHORT_PARTITION):
            subprocess.run(["scancel", "--full", "--partition", partition],
                           env=self.environment(), capture_output=True, timeout=10)

    def stop(self) -> None:
        if "slurmctld" in self.processes and self.processes["slurmctld"].poll() is None:
            self.cancel_all()
        for name in ("slurmd", "slurmctld", "munged"):
            stop_group(self.processes.pop(name, None))


class MlflowServer:
    """`mlflow server` on 127.0.0.1 (or `host`) over `folder`/mlflow.db, artifacts served from
    `folder`/artifacts. `auth=True`: MLflow's basic authentication, admin credentials
    `ADMIN`/`ADMIN_PASSWORD` (written into the app's config file here)."""

    ADMIN = "admin"
    ADMIN_PASSWORD = "gemmlab-test-password"

    def __init__(self, folder: Path, port: Optional[int] = None, auth: bool = False,
                 host: str = "127.0.0.1", allowed_hosts: Optional[str] = None):
        self.folder = Path(folder)
        self.port = port or free_port()
        self.auth = auth
        self.host = host
        self.allowed_hosts = allowed_hosts
        self.process: Optional[subprocess.Popen] = None

    @property
    def uri(self) -> str:
        return f"http://{self.host}:{self.port}"

    @staticmethod
    def missing(auth: bool = False) -> Optional[str]:
        try:
            import mlflow  # noqa: F401
            if auth:
                import flask_wtf  # noqa: F401
        except ImportError as error:
            return f"mlflow{'[auth]' if auth else ''} not installed ({error})"
        return None

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "mlflow", "server", "--host", self.host,
                   "--port", str(self.port), "--workers", "1",
                   "--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}",
                   "--artifacts-destination", str(self.folder / "artifacts")]
        if self.allowed_hosts:
            command += ["--allowed-hosts", self.allowed_hosts]
        if self.auth:
            command += ["--app-name", "basic-auth"]
        return command

    def environment(self) -> dict:
        env = dict(os.environ)
        env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
        for key in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD",
                    "MLFLOW_TRACKING_URI"):
            env.pop(key, None)
        if self.auth:
            ini = self.folder / "basic_auth.ini"
            ini.write_text(
                "[mlflow]\ndefault_permission = READ\n"
                f"database_uri = sqlite:///{self.folder / 'basic_auth.db'}\n"
                f"admin_username = {self.ADMIN}\nadmin_password = {self.ADMIN_PASSWORD}\n"
                "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
            env["MLFLOW_AUTH_CONFIG_PATH"] = str(ini)
            env["MLFLOW_FLASK_SERVER_SECRET_KEY"] = "gemmlab-tests-secret"
        return env

    def start(self, timeout_s: float = 90.0) -> "MlflowServer":
        self.folder.mkdir(parents=True, exist_ok=True)
        self.process = _spawn(self.command(), self.folder / "server.log", self.environment())
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited ({self.process.returncode}):\n"
                                   + self.log()[-3000:])
            if self.healthy():
                return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError("mlflow server did not answer /health:\n" + self.log()[-3000:])

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def log(self) -> str:
        path = self.folder / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        stop_group(self.process)
        self.process = None


def _serve_forever(service) -> None:
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()


def main(argv: list[str]) -> int:
    what = argv[0] if argv else ""
    folder = Path(argv[1]) if len(argv) > 1 else Path(tempfile.mkdtemp(prefix="gemmlab-"))
    if what == "slurm":
        reason = OneNodeSlurm.missing()
        if reason:
            print(f"cannot start: {reason}")
            return 1
        cluster = OneNodeSlurm(folder).start()
        print(f"one-node Slurm running in {folder} (partition {PARTITION}, "
              f"{cluster.cpus} CPUs); in another shell:\n  export SLURM_CONF={cluster.conf}\n"
              "Ctrl-C stops it.", flush=True)
        _serve_forever(cluster)
        return 0
    if what == "mlflow":
        server = MlflowServer(folder, port=5000 if len(argv) < 3 else int(argv[2])).start()
        print(f"mlflow server at {server.uri} over {folder}/mlflow.db; "
              f"tracking.uri={server.uri}\nCtrl-C stops it.", flush=True)
        _serve_forever(server)
        return 0
    print("usage: python tests/services.py slurm|mlflow [FOLDER] [PORT]")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
