"""`gemmlab ui` (or `python -m runner.ui`, `make ui`): the MLflow UI on the store the runs went to.

    gemmlab ui [--uri sqlite:///mlflow.db] [--port 5000] [--sweep ID|SHORT-ID|NAME] [--no-view]

Lists the store's recent sweeps (name, backend, jobs, when) with the URL of each parent run,
then opens one: the sweep named by `--sweep` (its run id, the short id the terminal prints, or
its run name), else the newest. For that sweep it writes a view of its runs into the
experiment's tags (runner/ui_views.py: kernel, backend, size, rate, headline %, hygiene and
tiling as columns, best rate first; the rate-against-size chart first, its lines coloured by
their runs' `mlflow.runColor` tags; `--no-view` leaves the store untouched) and prints the URLs
that open it, before the server's own log lines.
Then it starts `mlflow server` on 127.0.0.1 only (job execution off), waits until it answers,
and on Ctrl-C or SIGTERM stops the server it started, by its own process id (and that
process's group, which holds the server's workers).

`--uri http://…` (a tracking server: a team's shared one) is already a UI: the same lines are
printed with that server's own URLs, once it is checked to answer this client (its host, its
credentials: one line otherwise), and nothing is started.
"""

import argparse
import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Optional

from runner import ui_views
from runner.record import names
from runner.record.server import is_server
from runner.results import runs as recorded

HOST = "127.0.0.1"
LISTED = 10  # sweeps listed, newest first


def run_url(base: str, run) -> str:
    return f"{base}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"


def server_command(uri: str, port: int) -> list[str]:
    return [sys.executable, "-m", "mlflow", "server", "--host", HOST, "--port", str(port),
            "--workers", "1", "--backend-store-uri", uri]


def children(client, parent) -> list:
    """Every run under the sweep's parent: its jobs and its series runs (a chart's lines)."""
    runs, token = [], None
    while True:
        page = client.search_runs([parent.info.experiment_id],
                                  f"tags.`{names.PARENT_RUN_ID}` = '{parent.info.run_id}'",
                                  max_results=1000, page_token=token)
        runs += list(page)
        token = page.token
        if not token:
            return runs


def jobs_of(runs: list) -> list:
    """The sweep's jobs: its children less its series runs (a chart's lines)."""
    return [r for r in runs if r.data.tags.get(names.SERIES) != "true"]


def summary_line(client, parent, base: str) -> str:
    """One sweep: name, backend(s), jobs, when (UTC), short id and its parent run's URL."""
    jobs = jobs_of(children(client, parent))
    backends = sorted({r.data.params.get(names.BACKEND_NAME, "?") for r in jobs}) or ["?"]
    when = dt.datetime.fromtimestamp(parent.info.start_time / 1000, dt.timezone.utc)
    return (f"  {parent.info.run_id[:8]}  {when:%Y-%m-%d %H:%M} UTC  {'+'.join(backends):<7} "
            f"{len(jobs):>4} jobs  {parent.info.run_name}\n"
            f"            {run_url(base, parent)}")


def describe(client, uri: str, base: str, sweep: Optional[str], view: bool) -> list[str]:
    """The lines printed before the server starts: the recent sweeps, then the URLs of the one
    opened (named by `sweep`, else the newest). A sweep that is not in the store: NoRuns."""
    ids = recorded.experiment_ids(client, None)
    found = recorded.sweeps(client, ids)
    chosen = recorded.find_sweep(client, sweep, ids) if sweep is not None else (
        found[0] if found else None)
    lines = [f"MLflow UI on {uri}: {base}" if base != uri.rstrip("/") else
             f"MLflow UI of the tracking server: {base}"]
    if chosen is None:
        return [*lines, ("no sweep recorded yet (python -m runner -m kernel=matmul_1,matmul_2 "
                         "size=256,512)")]
    more = f", {len(found) - LISTED} older not listed" if len(found) > LISTED else ""
    lines.append(f"sweeps, newest first ({len(found)}{more}; open one with --sweep <id or "
                 "name>):")
    lines += [summary_line(client, parent, base) for parent in found[:LISTED]]
    runs = children(client, chosen)
    keys, unwritten = None, ""
    if view and runs:
        try:
            keys = ui_views.write_view(client, chosen, runs)
        except Exception as error:  # a read-only store: the URLs below still open the sweep
            unwritten = f"  (no view written: {str(error).splitlines()[0][:160]})"
    experiment = chosen.info.experiment_id
    opened = (f"opened: {chosen.info.run_name} ({chosen.info.run_id[:8]}, "
              f"{len(jobs_of(runs))} jobs)")
    lines += ["", opened]
    if keys is not None:
        lines += ["  its jobs, best rate first, with kernel, size, rate and % as columns:",
                  f"    {ui_views.view_url(base, experiment, keys[0])}",
                  "  its charts, rate against size first:",
                  f"    {ui_views.view_url(base, experiment, keys[1], charts=True)}"]
    elif unwritten:
        lines.append(unwritten)
    elif view and runs:
        lines.append(f"  (no view written: it is MLflow {ui_views.MLFLOW_MAJOR}'s format and "
                     f"MLflow {ui_views.installed_major()} is installed)")
    lines += ["  its parent run (its description: the best rate per size and kernel):",
              f"    {run_url(base, chosen)}"]
    return lines


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


def _on_server(uri: str, sweep: Optional[str], view: bool) -> int:
    """`gemmlab ui --uri http://…`: the server's sweeps and the chosen one's URLs, at the
    server's own address; a server that does not answer or refuses: one line, exit 1."""
    from runner.errors import RunError
    from runner.record.server import check_server, quiet_retries, use_http_defaults

    use_http_defaults()
    quiet_retries(uri)
    try:
        check_server(uri)
    except RunError as error:
        raise SystemExit(f"gemmlab: error: cannot read MLflow at --uri {uri}: {error}") from None
    print("\n".join(describe(recorded.client(uri), uri, uri.rstrip("/"), sweep, view)),
          flush=True)
    return 0


def main(argv=None, wait_s: float = 120.0) -> Optional[int]:
    parser = argparse.ArgumentParser(prog="gemmlab ui", description=__doc__.splitlines()[0])
    parser.add_argument("--uri", default=recorded.DEFAULT_URI,
                        help="the store the runs went to (tracking.uri; default %(default)s)")
    parser.add_argument("--port", type=int, default=5000)
    parser.add_argument("--sweep", help="the sweep to open: its run id, short id or run name "
                        "(default: the newest)")
    parser.add_argument("--no-view", dest="view", action="store_false",
                        help="write no view into the store's experiment tags")
    args = parser.parse_args(argv)
    if is_server(args.uri):  # its own UI: its URLs, nothing started
        return _on_server(args.uri, args.sweep, args.view)
    client = recorded.client(args.uri)  # a store that does not exist: one line, exit 1
    base = f"http://{HOST}:{args.port}"
    if _listening(args.port):
        raise SystemExit(f"gemmlab: error: port {args.port} on {HOST} is in use: give --port")
    print("\n".join(describe(client, args.uri, base, args.sweep, args.view)), flush=True)
    server = subprocess.Popen(server_command(args.uri, args.port), start_new_session=True,
                              env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
                              stdout=subprocess.DEVNULL)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    # Ctrl-C even where the shell started this with SIGINT ignored (a background job)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
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
        print(f"MLflow UI answering on {base}; Ctrl-C stops it", flush=True)
        return server.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        _stop(server)
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


if __name__ == "__main__":
    sys.exit(main())
