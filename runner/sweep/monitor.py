"""The sweep's progress bar, fed by polling the children MLflow has recorded (whichever launcher
runs them): how many jobs ended, which run now, the best rate so far."""

import threading
from typing import Optional

from rich.markup import escape

from runner.record import names
from runner.results.records import rate as _rate
from runner.results.records import size_label as _size
from runner.results.records import tiling as _tiling
from runner.results.records import unit as _unit
from runner.sweep.slurm import current_queue
from runner.sweep.summary import SweepSummary, sweep_children


def _progress_line(summary: SweepSummary) -> str:
    running = [r for r in summary.runs if r.info.status == "RUNNING"]
    now = escape(", ".join(r.info.run_name for r in running[:2]) or "—")
    best = summary.best_overall()
    best_text = "—" if best is None else (
        f"{_rate(best):,.1f} {_unit(best)} {best.data.params.get(names.KERNEL_NAME)} "
        f"{_size(best)} "
        f"{_tiling(best)}".strip())
    skipped = f" · {summary.counts['cached']} cached" if summary.counts["cached"] else ""
    return f"sweep · now: {now} · best: {escape(best_text)}{skipped}"


def _queue_text() -> str:
    """The Slurm queue's line (pending jobs and Slurm's reason) where the sweep's jobs are
    there."""
    queue = current_queue()
    line = queue.line() if queue is not None else ""
    return f" · {escape(line)}" if line else ""


class ProgressMonitor:
    """A bar over the sweep's jobs, fed by polling the children MLflow has recorded."""

    def __init__(self, uri: str, experiment_id: str, parent_run_id: str,
                 expected: Optional[int]):
        from mlflow.tracking import MlflowClient
        from rich.progress import Progress

        from runner.terminal import progress as progress_bars

        self._client = MlflowClient(uri)
        self._where = (experiment_id, parent_run_id)
        self._progress = Progress(*progress_bars.columns(), transient=False)
        self._task = self._progress.add_task("sweep", total=expected)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self.enabled = self._progress.console.is_terminal
        if self.enabled:
            self._progress.start()
            progress_bars.share(self._progress)  # runs' timing bars join this display
            self._thread.start()

    def _poll(self) -> None:
        from runner.record import server

        uri = self._client.tracking_uri
        on_server = server.is_server(uri)
        while not self._stop.wait(1.0):
            if on_server and server.down(uri):  # not answering: no retries every second
                continue
            try:
                summary = SweepSummary.of(sweep_children(self._client, *self._where))
            except Exception as error:  # a busy store: try again at the next tick
                if on_server and server.not_answering(error):
                    server.mark_down(uri)
                continue
            self._progress.update(self._task, completed=summary.finished,
                                  description=_progress_line(summary) + _queue_text())

    def close(self) -> None:
        from runner.terminal import progress as progress_bars

        if self.enabled:
            self._stop.set()
            self._thread.join(timeout=5)
            progress_bars.share(None)
            self._progress.stop()
