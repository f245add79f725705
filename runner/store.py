"""The tracking store: a local sqlite store is created and migrated once, under a file lock.

MLflow creates and migrates a sqlite store in the first process that opens it. Several processes
opening a store that does not exist yet (the parallel jobs of a sweep) race in that schema setup
and all fail; once the store exists, parallel writers are fine. So every process opens the store
for the first time while holding a lock beside the database file, and the first one creates it.
"""

import functools
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlparse

from filelock import FileLock

LOCK_TIMEOUT_S = 300  # a migration of a large store can take a while; a hang cannot


def sqlite_path(uri: str) -> Optional[Path]:
    """The database file of a `sqlite:///` URI (relative to the working directory), else None."""
    if not uri.startswith("sqlite:"):
        return None
    path = unquote(urlparse(uri).path)
    # sqlite:///relative.db -> "/relative.db"; sqlite:////abs/x.db -> "//abs/x.db"
    path = path[1:] if path.startswith("/") else path
    return Path(path).resolve() if path and path != ":memory:" else None


@functools.lru_cache(maxsize=None)
def ensure_store(uri: str) -> None:
    """Open (create or upgrade) the store at `uri` once per process, safely across processes.

    A server (http://) or another database owns its own schema: nothing to do here.
    """
    path = sqlite_path(uri)
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    from mlflow.tracking import MlflowClient

    with FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S):
        MlflowClient(uri).search_experiments(max_results=1)  # creates and migrates the schema
