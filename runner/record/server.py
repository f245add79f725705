"""A tracking server (`tracking.uri=http://…`): checked before anything is recorded, and ridden
through an outage.

- `check_server(uri)`: the server answers `/health` within 5 s, then an API request as this
  client makes them (its Host header, MLflow's credentials from MLFLOW_TRACKING_USERNAME /
  _PASSWORD) answers 2xx. MLflow 3.17 answers `/health` to any host, but 403 "Invalid Host
  header" to every API request from a name outside its `--allowed-hosts`, and 401 to a client
  without credentials where it runs `--app-name basic-auth`: each is a RunError naming the fix,
  so that a run or a sweep stops in one line before anything is recorded or run.
- MLflow retries a request that finds no server (HTTP_DEFAULTS: about 15 s with backoff, unless
  the user set MLflow's own variables). urllib3 logs each retry as a warning; `quiet_retries`
  turns the first into one gemmlab line (the server is not answering, and what happens) and
  drops the rest.
- `not_answering(error)`: a request failed because the server did not answer (refused, timed
  out, 5xx after the retries): the record goes to the spool (runner/record/spool.py) instead.
  `mark_down` remembers it for this process, so that the next records do not each wait out the
  retries: `down(uri)` asks `/health` once (2 s) before the next write, and the server counts as
  back as soon as it answers.
"""

import base64
import hashlib
import http.client
import logging
import os
import threading
import time
from pathlib import Path
from typing import Optional
from urllib.parse import urlparse

from runner.errors import RunError
from runner.user_cache import cache_path

PROBE_TIMEOUT_S = 5.0  # a tracking server that has not answered by then is not answering
HEALTH_TIMEOUT_S = 2.0  # asked once before a record while the server is known to be down

# MLflow retries a request to a server 7 times with a backoff factor of 2 (minutes in all) and
# waits 120 s for each answer; a server that went away mid-sweep would hang every job that long.
# Where the user has not chosen, gemmlab retries for about 15 s (0 + 2 + 4 + 8 s and MLflow's
# jitter) and waits 15 s per answer; what still cannot be written is kept in the spool.
# MLflow also prints "🏃 View run … at: <url>" on stdout as each run ends on a server (one more
# request per run): gemmlab prints each run's own line.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "4",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
                 "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
USERNAME_ENV, PASSWORD_ENV = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"


def is_server(uri: str) -> bool:
    return str(uri).startswith(("http://", "https://"))


def use_http_defaults() -> None:
    for name, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)


def retry_budget_s() -> float:
    """About how long MLflow retries a request that finds no server (its backoff, no jitter)."""
    try:
        retries = int(os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "7"))
        factor = float(os.environ.get("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "2"))
    except ValueError:
        return 0.0
    return sum(min(factor * 2 ** (n - 1), 120.0) for n in range(2, retries + 1))


def _connection(uri: str, timeout: float):
    url = urlparse(uri)
    kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    return kind(url.hostname or "localhost", url.port, timeout=timeout), url


def _get_health(uri: str, timeout: float) -> int:
    """The status of GET <uri>/health, once; OSError or HTTPException where nothing answers."""
    connection, url = _connection(uri, timeout)
    try:
        connection.request("GET", url.path.rstrip("/") + "/health")
        response = connection.getresponse()
        response.read(256)
        return response.status
    finally:
        connection.close()


def answers(uri: str, timeout: float = HEALTH_TIMEOUT_S) -> bool:
    """Whether the server answers /health with 200 within `timeout` seconds (once)."""
    try:
        return _get_health(uri, timeout) == 200
    except (OSError, http.client.HTTPException):
        return False


def probe_server(uri: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """A RunError unless the tracking server at `uri` answers /health within `timeout` seconds
    (any HTTP status counts as an answer: the server is there). Once, with no retries."""
    try:
        _get_health(uri, timeout)
    except (OSError, http.client.HTTPException) as error:
        why = "no answer" if isinstance(error, TimeoutError) else \
            (str(error).strip() or type(error).__name__)
        port = urlparse(uri).port or 5000
        raise RunError(f"the tracking server at {uri} does not answer within {timeout:g} s "
                       f"({why}); start it (mlflow server --host 127.0.0.1 --port {port} …) or "
                       "set tracking.uri to a store that exists, e.g. sqlite:///mlflow.db"
                       ) from None


class ServerRefused(RunError):
    """The server answered, and refused this client: the message says why and what to change."""


def _host_header(uri: str) -> str:
    """What this client sends as Host: the name and port of tracking.uri (no port where it is
    the scheme's own), the form `--allowed-hosts` has to list."""
    url = urlparse(uri)
    return url.netloc.rsplit("@", 1)[-1] or "localhost"


def refusal(uri: str, status: int, body: str) -> str:
    """Why the server at `uri` answered `status` (not 2xx) with `body`, and the setting that
    fixes it: the part after `cannot record in MLflow at tracking.uri=…: `."""
    text = " ".join(body.split())[:160]
    user, password = _credentials()
    if status == 403 and "invalid host header" in text.lower():
        return (f"the server refused this host (403 Invalid Host header): start mlflow server "
                f"with --allowed-hosts {_host_header(uri)} (every host:port its clients use, "
                "comma-separated), or use a tracking.uri whose host it allows")
    if status == 401:
        if not user or not password:
            return (f"the server asks for a user and password (401 Unauthorized): set "
                    f"{USERNAME_ENV} and {PASSWORD_ENV} to a user of its basic-auth app")
        return (f"the server refused the user {user!r} (401 Unauthorized: no such user, or a "
                f"wrong password): check {USERNAME_ENV} and {PASSWORD_ENV}")
    if status == 403:
        who = f"the user {user!r}" if user else "this client"
        return (f"the server refused {who} (403 {text or 'Forbidden'}): ask its admin for "
                f"permission on the experiment, or set {USERNAME_ENV} to a user who has it")
    reason = http.client.responses.get(status, "")
    return (f"the server answered {status} {reason}".rstrip() + (f" ({text})" if text else "")
            + " to an API request: is tracking.uri an MLflow tracking server?")


def failure_line(uri: str, error: BaseException) -> str:
    """Why recording at `uri` failed, in one line: a RunError's own words, a refusal's fix, a
    server that stopped answering, else the exception's first line."""
    if isinstance(error, RunError):
        return (str(error).strip().splitlines() or [""])[0]
    said = refusal_of(uri, error)
    if said:
        return said
    if not_answering(error):
        return (f"the server stopped answering ({retry_budget_s():.0f} s of retries): check it "
                "is running, then run the command again")
    first = (str(error).strip().splitlines() or [""])[0][:300]
    return f"{type(error).__name__}: {first}"


def _credentials() -> tuple:
    """MLflow's own: MLFLOW_TRACKING_USERNAME / _PASSWORD, else ~/.mlflow/credentials."""
    try:
        from mlflow.utils.credentials import read_mlflow_creds
    except ImportError:
        return os.environ.get(USERNAME_ENV), os.environ.get(PASSWORD_ENV)
    creds = read_mlflow_creds()
    return creds.username, creds.password


def _authorization() -> dict:
    user, password = _credentials()
    if user and password:
        token = base64.standard_b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {token}"}
    if os.environ.get("MLFLOW_TRACKING_TOKEN"):
        return {"Authorization": f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"}
    return {}


SEARCH = "/api/2.0/mlflow/experiments/search"


def check_server(uri: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """The server answers (probe_server), and answers an API request of this client with 2xx:
    else a ServerRefused naming the fix (refusal). Once each, with no retries."""
    probe_server(uri, timeout)
    connection, url = _connection(uri, timeout)
    try:
        connection.request("POST", url.path.rstrip("/") + SEARCH, body=b'{"max_results": 1}',
                           headers={"Content-Type": "application/json", **_authorization()})
        response = connection.getresponse()
        status, body = response.status, response.read(2000).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as error:
        raise RunError(f"the tracking server at {uri} answered /health but not {SEARCH} "
                       f"({str(error).strip() or type(error).__name__})") from None
    finally:
        connection.close()
    if not 200 <= status < 300:
        raise ServerRefused(refusal(uri, status, body))


def refusal_of(uri: str, error: BaseException) -> Optional[str]:
    """The one line of `refusal` for an MlflowException raised by a request the server answered
    401 or 403 (its credentials or host were refused mid-way), else None."""
    import re

    match = re.search(r"error code (\d{3}) != 200\. Response body: '(.*)'", str(error), re.S)
    if match and match.group(1) in ("401", "403"):
        return refusal(uri, int(match.group(1)), match.group(2))
    return None


def not_answering(error: BaseException) -> bool:
    """Whether `error` (MLflow's, or one it wraps) says the server did not answer: the
    connection refused or dropped, a request timed out, or 5xx/429 answers until the retries
    ran out. Not an answer that refuses the request (4xx): that is no outage."""
    try:
        import requests
        from urllib3.exceptions import MaxRetryError, ProtocolError
        transient = (requests.exceptions.ConnectionError, requests.exceptions.Timeout,
                     requests.exceptions.RetryError, MaxRetryError, ProtocolError,
                     ConnectionError, TimeoutError)
    except ImportError:  # MLflow brings requests; without it nothing was sent
        return False
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, transient):
            return True
        text = str(error)
        if "failed with exception" in text and ("Max retries exceeded" in text
                                                 or "Connection" in text):
            return True  # MLflow's MlflowException around requests' error
        if "failed with timeout exception" in text:
            return True
        error = error.__cause__ if error.__cause__ is not None else (
            None if error.__suppress_context__ else error.__context__)  # `from None`: not it
    return False


class _Outages:
    """The servers this process found not answering, and whether it has said so."""

    def __init__(self):
        self._lock = threading.Lock()
        self._down: dict[str, float] = {}  # uri -> when it was found down (monotonic)
        self._said: set[str] = set()
        self.uri: Optional[str] = None  # the server this process records into, for the line

    def mark_down(self, uri: str) -> None:
        with self._lock:
            self._down.setdefault(uri, time.monotonic())
        say_not_answering(uri)

    def down(self, uri: str) -> bool:
        """Known down and still not answering /health (asked now, once); False once it does."""
        with self._lock:
            if uri not in self._down:
                return False
        if answers(uri):
            with self._lock:
                self._down.pop(uri, None)
            return False
        return True

    def first_time(self, uri: str) -> bool:
        with self._lock:
            if uri in self._said:
                return False
            self._said.add(uri)
            return True


outages = _Outages()


def mark_down(uri: str) -> None:
    outages.mark_down(uri)


def down(uri: str) -> bool:
    return outages.down(uri)


SPOOL_ENV = "GEMMLAB_SPOOL"


def spool_root() -> Optional[Path]:
    """Where records a server could not take are kept (runner/record/spool.py): $GEMMLAB_SPOOL,
    else ~/.cache/gemmlab/spool; None with GEMMLAB_SPOOL=off."""
    return cache_path(SPOOL_ENV, "spool")


def spool_folder(uri: str) -> Optional[Path]:
    """The folder of the records kept for the server at `uri` (None with GEMMLAB_SPOOL=off)."""
    root = spool_root()
    if root is None:
        return None
    return root / hashlib.sha256(str(uri).rstrip("/").encode()).hexdigest()[:16]


def attempt(uri: str, write, *args, **kwargs) -> bool:
    """`write(*args, **kwargs)` against the store at `uri`: True once done; False, having done
    nothing, where it is a server known down that still does not answer /health, or one that
    stops answering now (MLflow's retries ran out: marked down). Any other error is raised."""
    if is_server(uri) and down(uri):
        return False
    try:
        write(*args, **kwargs)
    except Exception as error:
        if not (is_server(uri) and not_answering(error)):
            raise
        mark_down(uri)
        return False
    return True


def say_not_answering(uri: Optional[str]) -> None:
    """Once per process and server: one line saying the server is not answering and what
    happens (records retried, then kept in the spool and written once it answers)."""
    uri = uri or outages.uri
    if not uri or not outages.first_time(uri):
        return
    from rich.console import Console  # the terminal's own lines import the run: not here
    from rich.markup import escape

    folder = spool_folder(uri)
    kept = f"kept in {folder}" if folder else f"lost ({SPOOL_ENV}=off)"
    Console(stderr=True, soft_wrap=True, highlight=False).print(
        "[bold yellow]gemmlab:[/] " + escape(
            f"the MLflow server at {uri} is not answering: each record is retried for about "
            f"{retry_budget_s():.0f} s, then {kept} and written once it answers (by this "
            f"command's end, the next gemmlab command on {uri}, or gemmlab sync)"))


class _RetriesSaidOnce(logging.Filter):
    """urllib3's "Retrying (Retry(total=…)) after connection broken by …" warnings, one per
    retry of every request: the first becomes gemmlab's one line, none reaches the terminal."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Retrying"):
            say_not_answering(None)
            return False
        return True


_quieted = False


def quiet_retries(uri: str) -> None:
    """urllib3's retry warnings off the terminal for this process (said once by gemmlab)."""
    global _quieted
    if is_server(uri):
        outages.uri = outages.uri or str(uri)
    if _quieted:
        return
    _quieted = True
    logging.getLogger("urllib3.connectionpool").addFilter(_RetriesSaidOnce())
