"""Progress bars. A sweep shows one live display; a run's timing bars join it instead of
opening a second one (rich allows one live display at a time)."""

from contextlib import contextmanager
from typing import Iterator, Optional

from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn,
                           TimeElapsedColumn)

_shared: Optional[Progress] = None


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
