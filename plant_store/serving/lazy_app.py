"""The WSGI app, built in the process that serves it rather than the one that imports it.

Pre-fork servers (gunicorn ``--preload``, uWSGI without ``--lazy-apps``) import the app in
a master and fork the workers from it. A store opened at import would be copied into every
worker (its lock, its descriptors and its index, each worker then acknowledging plants the
others contradict), and the webhook thread would stay behind in the master. So the store is
opened, the webhook worker started and the app built at a process's first request. A
process that cannot open the store (another one owns the data directory) answers 503, which
acknowledges nothing, and tries again at most once a second. Why goes to the log (once),
never to clients: it names the data directory, and the owner's PID, or the database.

The JSON-file and memory stores serve one process: a pre-fork server with more workers
would have all but one answer 503 (or, for memory, each keep plants of its own), so
gunicorn refuses to start with them (:mod:`plant_store.gunicorn_hooks`) and uWSGI logs it
(:func:`warn_under_uwsgi`).
"""

import atexit
import logging
import os
import shlex
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from plant_store.config import Config
from plant_store.http import errors
from plant_store.http.operational import HEALTHY
from plant_store.service import Service
from plant_store.stores import StoreError, one_process_problem
from plant_store.tokens import TokenError, TokenFile

if TYPE_CHECKING:  # WSGI's types, in typeshed only (wsgiref.types is 3.11's)
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

log = logging.getLogger("plant_store.lazy_app")  # the name users filter on

RETRY_INTERVAL = 1.0  # seconds between tries to open the store after one failed
UNAVAILABLE = "This server process cannot serve the store; see the server's log."


def warn_under_uwsgi(config: Config) -> bool:
    """Under uWSGI with several processes on a one-process store, one error line at start
    (in the master, or the first worker with --lazy-apps); nothing elsewhere. Whether so."""
    try:
        import uwsgi  # only inside uWSGI
    except ImportError:
        return False
    problem = one_process_problem(config.store, uwsgi.numproc, "uWSGI", "--processes 1")
    if problem and uwsgi.worker_id() <= 1:
        log.error("%s", problem)
    return bool(problem)


class LazyApp:
    """A WSGI callable that builds the service once per process.

    Invariants: an app serves only in the PID that built it (a forked copy builds its own);
    builds run one at a time (``_building``), so concurrent first requests build once; after
    a failed build, requests answer 503 at once until ``RETRY_INTERVAL`` has passed. Only a
    process's first try waits ``lock_timeout`` for the owner (a reload's old worker
    finishing): a later one that waited every time would stall its requests for nothing.
    """

    def __init__(self, config: Config, metrics_dir: str | None = None,
                 wait_for_owner: bool = True) -> None:
        """``metrics_dir``: where the processes of a pre-fork server each keep their
        counts, so that a scrape sums them (see :mod:`plant_store.metrics`).
        ``wait_for_owner``: False when sibling workers are known to contend for a store that
        serves one process, so none waits ``lock_timeout`` for another that never lets go."""
        self._config = config
        self._metrics_dir = metrics_dir
        self._wait = wait_for_owner
        self._building = threading.Lock()
        self._built: tuple[int | None, Callable[..., Iterable[bytes]] | None] = (
            None, None)  # (PID, app)
        self._failed: tuple[int | None, float, str] = (None, 0.0, "")  # (PID, retry at, why)
        self._health = {"/health", config.url_prefix + "/health"}  # as the app serves it

    def __call__(self, environ: "WSGIEnvironment",
                 start_response: "StartResponse") -> Iterable[bytes]:
        pid, app = self._built
        if pid != os.getpid() or app is None:  # None only with another PID: for mypy
            if environ.get("PATH_INFO") in self._health:  # liveness: the process serves
                return _alive(environ, start_response)
            app = self._build()
            if app is None:
                return self._unavailable(start_response)
        return app(environ, start_response)

    def _build(self) -> Callable[..., Iterable[bytes]] | None:
        pid = os.getpid()
        failed_pid, retry_at, _ = self._failed
        if failed_pid == pid and time.monotonic() < retry_at:
            return None
        with self._building:
            built_pid, app = self._built
            if built_pid == pid:
                return app
            failed_pid, retry_at, reason = self._failed
            if failed_pid == pid and time.monotonic() < retry_at:
                return None
            try:
                app = self._create(
                    self._config.lock_timeout if failed_pid != pid and self._wait else 0.0)
            # OSError: the metrics' directory; TokenError: a token file that cannot be
            # read (not a 500 and a traceback a request: the hostile pass on issue 52).
            except (StoreError, TokenError, OSError) as exc:
                if failed_pid != pid or str(exc) != reason:
                    log.error("plant-store process %d answers 503 until it can open the "
                              "store and read its tokens: %s", pid, exc)
                self._failed = (pid, time.monotonic() + RETRY_INTERVAL, str(exc))
                return None
            self._built = (pid, app)
            return app

    def _create(self, lock_timeout: float) -> Callable[..., Iterable[bytes]]:
        tokens = TokenFile(self._config.token_file)
        service = Service(self._config, tokens=tokens, lock_timeout=lock_timeout,
                          metrics_dir=self._metrics_dir)
        _tell_if_no_tokens(tokens)
        atexit.register(_close, os.getpid(), service)
        return service.app

    def _unavailable(self, start_response: "StartResponse") -> list[bytes]:
        # Why is in the log only: the data directory, the owner's PID, the database are the
        # operator's to know, not every client's.
        body = errors.document(503, UNAVAILABLE)
        start_response("503 Service Unavailable", [
            ("Content-Type", "application/json"), ("Content-Length", str(len(body))),
            ("Retry-After", f"{RETRY_INTERVAL:g}")])
        return [body]


def _alive(environ: "WSGIEnvironment", start_response: "StartResponse") -> list[bytes]:
    """``GET /health`` before the app is built, or while it cannot be: 200, as the app's own
    answer, without waiting to open a store (a database that is down is not a reason to
    restart this process)."""
    start_response("200 OK", [("Content-Type", "application/json"),
                              ("Content-Length", str(len(HEALTHY)))])
    return [] if environ.get("REQUEST_METHOD") == "HEAD" else [HEALTHY]


def _tell_if_no_tokens(tokens: TokenFile) -> None:
    """Whatever server runs the app, say how to get a token when there is none (``plant-store
    serve`` makes a first one itself; a WSGI server's workers must not race to)."""
    try:
        none = not tokens.entries()
    except TokenError:
        return  # the token check logs what is wrong with the file
    if none:
        log.warning("no tokens in %s: every API request is refused (401) until one is made: "
                    "plant-store token add --token-file %s --label LABEL (no restart needed)",
                    tokens.path, shlex.quote(tokens.path))


def _close(pid: int, service: Service) -> None:
    """At exit: finish the delivery in flight, then let go of the store, so a waiting
    successor takes over sooner. Not in a forked child, which inherited this hook."""
    if os.getpid() == pid:
        service.close()
