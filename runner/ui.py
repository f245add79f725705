"""`gemmlab ui` (or `python -m runner.ui`, `make ui`): the MLflow UI on the store the runs went to.

    gemmlab ui [--uri sqlite:///mlflow.db] [--port 5000]

Starts `mlflow server` on 127.0.0.1 only (job execution off), waits until it answers, prints
the URL of the latest sweep's parent run (its chart view draws rate against size, one line per
kernel) and of the experiments, and on Ctrl-C or SIGTERM stops the server it started, by its own
process id (and that process's group, which holds the server's workers).
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Optional

from runner.results import runs as recorded

HOST = "127.0.0.1"


def run_url(base: str, run) -> str:
    return f"{base}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"


def server_command(uri: str, port: int) -> list[str]:
    return [sys.executable, "-m", "mlflow", "server", "--host", HOST, "--port", str(port),
            "--workers", "1", "--backend-store-uri", uri]


def _listening(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=1).close()
        return True
    except OSError:
        return False


def _stop(server: subprocess.Popen) -> None:
    """End the server this command started: its process group (the server's own id)."""
    if server.poll() is not None:
        return
    try:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
    except ProcessLookupError:
        pass


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # SIGTERM ends it as Ctrl-C does: the server is stopped first


def main(argv=None, wait_s: float = 120.0) -> Optional[int]:
    parser = argparse.ArgumentParser(prog="gemmlab ui", description=__doc__.splitlines()[0])
    parser.add_argument("--uri", default=recorded.DEFAULT_URI,
                        help="the store the runs went to (tracking.uri; default %(default)s)")
    parser.add_argument("--port", type=int, default=5000)
    args = parser.parse_args(argv)
    client = recorded.client(args.uri)  # a store that does not exist: one line, exit 1
    latest = recorded.latest_sweep(client, recorded.experiment_ids(client, None))
    if _listening(args.port):
        raise SystemExit(f"gemmlab: error: port {args.port} on {HOST} is in use: give --port")
    server = subprocess.Popen(server_command(args.uri, args.port), start_new_session=True,
                              env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
                              stdout=subprocess.DEVNULL)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    # Ctrl-C even where the shell started this with SIGINT ignored (a background job)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    base = f"http://{HOST}:{args.port}"
    try:
        deadline = time.monotonic() + wait_s
        while not _listening(args.port):
            if server.poll() is not None:
                raise SystemExit(f"gemmlab: error: mlflow server exited ({server.returncode}) "
                                 f"before answering on {base}")
            if time.monotonic() > deadline:
                raise SystemExit(f"gemmlab: error: mlflow server did not answer on {base} "
                                 f"within {wait_s:.0f} s")
            time.sleep(0.3)
        print(f"MLflow UI on {args.uri}: {base}")
        if latest is not None:
            print(f"latest sweep, {latest.info.run_name}: {run_url(base, latest)}")
            print("  its Model metrics tab draws the best rate per kernel against size; select "
                  "two of its runs in the experiment's table and Compare them side by side")
        else:
            print("no sweep recorded yet (python -m runner -m kernel=matmul_1,matmul_2 "
                  "size=256,512)")
        print("Ctrl-C stops it", flush=True)
        return server.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        _stop(server)
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


if __name__ == "__main__":
    sys.exit(main())
