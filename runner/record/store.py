"""The tracking store: a local sqlite store is created and migrated once, under a file lock.

A new sqlite store is a copy of a template: the first store a version of MLflow creates on this
machine, kept empty under the user's cache (MLflow's schema migrations take about 1 s of a
first run, and of every test that records into a store of its own).

MLflow creates and migrates a sqlite store in the first process that opens it. Several processes
opening a store that does not exist yet (the parallel jobs of a sweep) race in that schema setup
and all fail; once the store exists, parallel writers are fine. So every process opens the store
for the first time while holding a lock beside the database file, and the first one creates it.
"""

import functools
import logging
import os
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlparse

from filelock import FileLock, Timeout

from runner.errors import RunError
from runner.record.server import check_server, is_server, quiet_retries, use_http_defaults
from runner.terminal.interrupts import shielded

log = logging.getLogger(__name__)

LOCK_TIMEOUT_S = 300  # a migration of a large store can take a while; a hang cannot


def holding_signals(uri: str):
    """Hold SIGINT and SIGTERM back while this process reads or writes the sqlite store `uri`;
    one that came meanwhile is raised when the block ends (runner/terminal/interrupts.py).

    Python raises KeyboardInterrupt wherever the main thread happens to be. Inside a store
    call, SQLAlchemy takes it for an exit and invalidates the connection: sqlite3 closes it
    with a statement still open (held by the interrupt's traceback), and SQLite keeps such a
    closed connection, and its lock on the file, until that statement is freed. Every write
    of the run's KILLED end, made by this same process right after, would wait out MLflow's
    20 s busy timeout and fail with "database is locked", and a sweep would go on to its next
    jobs. A server (http://) or another database needs no shield, and a hung request stays
    interruptible."""
    return shielded() if uri.startswith("sqlite:") else nullcontext()


def sqlite_path(uri: str) -> Optional[Path]:
    """The database file of a `sqlite:///` URI (relative to the working directory), else None."""
    if not uri.startswith("sqlite:"):
        return None
    path = unquote(urlparse(uri).path)
    # sqlite:///relative.db -> "/relative.db"; sqlite:////abs/x.db -> "//abs/x.db"
    path = path[1:] if path.startswith("/") else path
    return Path(path).resolve() if path and path != ":memory:" else None


def check_scheme(uri: str) -> None:
    """A RunError for a tracking URI without a scheme (`mlflow.db`, `./runs`): MLflow would take
    it for a folder of files, a store it has deprecated, and say so over many lines. Refused
    rather than guessed: `mlflow.db` could mean a database or a folder named so."""
    if urlparse(uri).scheme or uri == "databricks":
        return
    suggestion = f"sqlite:///{uri}" if uri.endswith(".db") else "sqlite:///mlflow.db"
    raise RunError(f"no scheme: MLflow would take '{uri}' for a folder of files, a store it has "
                   f"deprecated; allowed: a database file, tracking.uri={suggestion}, or a "
                   "server, tracking.uri=http://host:5000")


@functools.lru_cache(maxsize=None)
def ensure_store(uri: str) -> None:
    """Open (create or upgrade) the store at `uri` once per process, safely across processes.

    A server (http://) or another database owns its own schema: a server is only checked to
    answer, and to accept this client's requests (its host, its credentials), so that a server
    that is down or refuses fails the run in seconds in one line rather than after MLflow's
    retries (runner/record/server.py, check_server).
    A URI without a scheme is refused (check_scheme).
    """
    check_scheme(uri)
    if is_server(uri):
        use_http_defaults()  # MLflow's retries capped (runner/record/server.py)
        quiet_retries(uri)
        check_server(uri)  # 403 (--allowed-hosts), 401 (credentials): one line, nothing recorded
        return
    path = sqlite_path(uri)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunError(f"cannot create the folder of the sqlite store {path}: "
                       f"{error.strerror or error}; allowed: a path whose folder exists or can "
                       "be created, e.g. tracking.uri=sqlite:///mlflow.db") from None
    check_is_database(path)  # before the lock: no stray lock file beside a file that is not one
    from mlflow.tracking import MlflowClient

    with store_lock(path):
        if path.exists():
            MlflowClient(uri).search_experiments(max_results=1)  # migrates an older schema
            return
        # A new store is made under another name and moved into place when complete: MLflow's
        # migrations are many steps, and a Ctrl-C between two would leave a store that no
        # later run could open.
        partial = path.with_name(f".{path.name}.creating-{os.getpid()}")
        try:
            if not _from_template(partial):
                MlflowClient(f"sqlite:///{partial}").search_experiments(max_results=1)
                _keep_as_template(partial)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)


TEMPLATE_ENV = "GEMMLAB_STORE_TEMPLATE"


def template_path() -> Optional[Path]:
    """An empty store of this MLflow version, migrated: $GEMMLAB_STORE_TEMPLATE, else
    $XDG_CACHE_HOME/gemmlab/mlflow/empty-<version>.db (~/.cache/...); None when set to off."""
    import mlflow

    from runner.user_cache import cache_path

    return cache_path(TEMPLATE_ENV, "mlflow", f"empty-{mlflow.__version__}.db")


def _from_template(partial: Path) -> bool:
    """`partial` made a copy of the template and opened by MLflow, which finds its schema
    current (none of its ~1,700 migration statements run again: about 1 s) and, the template
    holding no experiment, gives it its Default experiment as it does a store it creates.
    False (nothing left at `partial`) without a template, or with one MLflow cannot open."""
    import shutil

    from mlflow.tracking import MlflowClient

    template = template_path()
    if template is None or not template.is_file():
        return False
    # A name of its own: MLflow keeps its database connections per URI, and one opened on a bad
    # copy would still be handed out for `partial` once the store is created there instead.
    copy = partial.with_name(partial.name + ".template")
    try:
        shutil.copyfile(template, copy)
        MlflowClient(f"sqlite:///{copy}").search_experiments(max_results=1)
        os.replace(copy, partial)
        return True
    except Exception as error:  # a template gone bad: made again from the next new store
        log.debug("the store template %s could not be used: %s", template, error)
        template.unlink(missing_ok=True)
        return False
    finally:
        copy.unlink(missing_ok=True)


def _keep_as_template(created: Path) -> None:
    """A copy of the store MLflow has just created, its Default experiment taken out (it names
    the folder of this store), as the template of the next new stores; written whole or not at
    all. Only where there is none: the first store a version of MLflow creates here."""
    import shutil
    import sqlite3

    template = template_path()
    if template is None or template.exists():
        return
    making = template.with_name(f".{template.name}.{os.getpid()}")
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(created, making)
        database = sqlite3.connect(making)
        try:
            with database:  # committed, then closed before the file is moved
                database.execute("DELETE FROM experiments")
        finally:
            database.close()
        os.replace(making, template)
    except (OSError, sqlite3.Error) as error:  # no template: the next store is created anew
        log.debug("no store template kept at %s: %s", template, error)
    finally:
        making.unlink(missing_ok=True)


SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def check_is_database(path: Path) -> None:
    """A RunError where `path` exists and is not an SQLite database (a folder, a README): MLflow
    would fail on it, and the store's lock would be left beside it. A file that does not exist
    yet, or an empty one, becomes the store. A store only ever appears complete (ensure_store
    moves it into place), so a file read here is either a database or none."""
    if path.is_dir():
        raise RunError(f"{path} is a folder, not a database file; allowed: an SQLite file or a "
                       "path that does not exist yet, e.g. tracking.uri=sqlite:///mlflow.db")
    try:
        with open(path, "rb") as file:
            header = file.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError:
        return  # unreadable: MLflow says why, under the lock as for any store
    if header and header != SQLITE_HEADER:
        raise RunError(f"file is not a database: {path} exists and holds something else; "
                       "allowed: an SQLite file or a path that does not exist yet, e.g. "
                       "tracking.uri=sqlite:///mlflow.db")


def _check_writable(lock_path: Path, store: Path) -> None:
    """A RunError at once where the lock file cannot be created: filelock would take that for a
    lock held by someone else and retry until its timeout."""
    try:
        os.close(os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644))
    except OSError as error:
        raise RunError(f"cannot write in {store.parent}, the folder of the sqlite store {store} "
                       f"(creating {lock_path.name}: {error.strerror or error}); allowed: a "
                       "folder this user can write, e.g. tracking.uri=sqlite:///mlflow.db"
                       ) from None


@contextmanager
def store_lock(store: Path, timeout: Optional[float] = None):
    """Hold the lock beside the sqlite file `store`. Fails at once where the folder cannot be
    written; waits (up to LOCK_TIMEOUT_S, saying so) only while another process holds it."""
    timeout = LOCK_TIMEOUT_S if timeout is None else timeout
    lock_path = Path(str(store) + ".lock")
    _check_writable(lock_path, store)
    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.warning("waiting for another gemmlab process that holds %s (it is creating or "
                    "upgrading the store; up to %g s)", lock_path, timeout)
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise RunError(f"another process has held {lock_path} for {timeout:g} s (creating "
                           f"or upgrading the store {store}); wait for it to finish, or end it"
                           ) from None
    try:
        yield
    finally:
        lock.release()
