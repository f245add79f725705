"""`gemmlab sync [--uri URI]`: write to a tracking server the records kept in the spool while it
was not answering (runner/record/spool.py), exactly once.

    gemmlab sync                       every server with records kept on this machine
    gemmlab sync --uri http://host:5000

The same is done, quietly unless something was written, by every gemmlab command that records
on a server (`write_kept`): a sweep as it starts and before its end's summary, a single run once
its run is open. Runs are written first (the server's run opened where it never was, its end
written where it was left RUNNING), then sweeps' ends (runner/sweep/callback.py,
`write_kept_end`: the parent's summary, series and status from its jobs as they are then).

Exit 0 once nothing is left; 1 where a server still does not answer or refused a record (moved
to the spool's failed/ folder, the reason beside it), each said in one line.
"""

import argparse
import sys
from typing import Optional

from runner.record import spool
from runner.record.server import answers, is_server


def write_kept(uri: str, say: bool = True) -> spool.Replayed:
    """Write what the spool keeps for `uri` (nothing to do costs one look at a folder): runs,
    and sweeps' ends (runner/sweep/callback.py); with `say`, a line for what was written and
    one for what the server refused."""
    if not is_server(uri) or not spool.pending(uri):
        return spool.Replayed(folder=spool.spool_folder(uri))
    from runner.sweep import outage
    from runner.sweep.callback import KEPT_HANDLERS

    return outage.write_kept(uri, KEPT_HANDLERS, say)


def sync(uri: str) -> int:
    """One server's records; the exit status (0 once nothing is left for it)."""
    from runner.record.server import check_server, quiet_retries, use_http_defaults
    from runner.terminal.summary import print_failure

    if not is_server(uri):
        print_failure(f"--uri {uri}: only a tracking server (http://, https://) has records "
                      "kept in the spool", None)
        return 1
    kept = spool.pending(uri)
    if not kept:
        print(f"gemmlab sync: nothing kept for {uri}")
        return 0
    use_http_defaults()
    quiet_retries(uri)
    if not answers(uri):
        print_failure(f"the MLflow server at {uri} does not answer: {len(kept)} record(s) stay "
                      f"kept in {spool.spool_folder(uri)}; run gemmlab sync again once it "
                      "answers", None)
        return 1
    try:
        check_server(uri)
    except Exception as error:  # a 401 or 403: the records wait for the right credentials
        print_failure(f"cannot write to MLflow at {uri}: {error}; {len(kept)} record(s) stay "
                      f"kept in {spool.spool_folder(uri)}", None)
        return 1
    done = write_kept(uri)
    if done.left:
        print_failure(f"the MLflow server at {uri} stopped answering: {done.left} record(s) "
                      f"stay kept in {done.folder}; run gemmlab sync again once it answers",
                      None)
        return 1
    if not done.written and not done.failed:
        print(f"gemmlab sync: nothing kept for {uri}")
    return 1 if done.failed else 0


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="gemmlab sync", description=__doc__.splitlines()[0])
    parser.add_argument("--uri", help="the tracking server (tracking.uri); default: every "
                        "server with records kept on this machine")
    args = parser.parse_args(argv)
    uris = [args.uri] if args.uri else spool.spooled_servers()
    if not uris:
        print(f"gemmlab sync: nothing kept (spool: {spool.spool_root()})")
        return 0
    return max(sync(uri) for uri in uris)


if __name__ == "__main__":
    sys.exit(main())
