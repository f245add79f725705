"""Progress bars. A sweep shows one live display; a run's timing bars join it instead of
opening a second one (rich allows one live display at a time)."""

from contextlib import contextmanager
from typing import Callable, Iterator, Optional

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

_shared: Optional[Progress] = None
_forward: Optional[Callable[[tuple], None]] = None


def columns() -> tuple:
    return (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn())


def share(progress: Optional[Progress]) -> None:
    """Make `progress` the display that run-level bars join (None: each opens its own)."""
    global _shared
    _shared = progress


@contextmanager
def task(label: str, total: int) -> Iterator[tuple[Progress, TaskID]]:
    """A bar for `total` steps: on the sweep's display when there is one, else a transient one
    (shown only on a terminal, never in logs and pipes)."""
    if _forward is not None:
        _forward(("bar", "start", label, total))
        try:
            yield _ForwardedBar(_forward), TaskID(0)
        finally:
            _forward(("bar", "end"))
        return
    if _shared is not None:
        task_id = _shared.add_task(label, total=total)
        try:
            yield _shared, task_id
        finally:
            _shared.remove_task(task_id)
        return
    with Progress(*columns(), transient=True) as progress:
        progress.disable = not progress.console.is_terminal
        yield progress, progress.add_task(label, total=total)


class _ForwardedBar:
    """What `task()` yields in a job's worker process: advancing it tells the supervisor, which
    draws the bar (one process owns the terminal) and takes each step as a sign of life."""

    def __init__(self, send: Callable[[tuple], None]):
        self._send = send

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        self._send(("bar", "advance", advance))

    def update(self, task_id: TaskID, total: float) -> None:
        """A new total (an adaptive count's estimate, runner/run/timing.py)."""
        self._send(("bar", "total", total))


def forward_to(send: Optional[Callable[[tuple], None]]) -> None:
    """In a worker process: send bars to the supervisor through `send` instead of drawing them."""
    global _forward
    _forward = send


class RelayedBars:
    """Draws the bars a worker process forwards (see `forward_to`): on the sweep's display when
    there is one, else on a transient one of its own. Call it with each forwarded message."""

    def __init__(self):
        self._progress: Optional[Progress] = None
        self._own = False
        self._task: Optional[TaskID] = None

    def __call__(self, message: tuple) -> None:
        kind = message[0]
        if kind == "start":
            self.__call__(("end",))
            label, total = message[1], message[2]
            if _shared is not None:
                self._progress, self._own = _shared, False
            else:
                self._progress, self._own = Progress(*columns(), transient=True), True
                self._progress.disable = not self._progress.console.is_terminal
                self._progress.start()
            self._task = self._progress.add_task(label, total=total)
        elif kind == "advance" and self._task is not None:
            self._progress.advance(self._task, message[1])
        elif kind == "total" and self._task is not None:
            self._progress.update(self._task, total=message[1])
        elif kind == "end" and self._task is not None:
            if self._own:
                self._progress.stop()
            else:
                self._progress.remove_task(self._task)
            self._progress, self._task = None, None
