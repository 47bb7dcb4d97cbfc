"""The probes, ``/health`` and ``/ready``, answered however busy the service is: in a lane
of threads of their own on the service's port, on a port of their own, and ``/ready``
told when every request thread of a server that says nothing of it has been held.

**The lane** (:class:`ProbeLaneDispatcher`, under ``plant-store serve``): waitress hands
each parsed request to one queue served by ``threads`` threads. When every thread waits
(on a table lock, a database that has gone, each bounded by ``database_timeout``), a probe
would wait its turn behind the queue, and an orchestrator probing with a 1 s timeout would
restart a process that is alive, or take a ready one out. So the dispatcher looks at the
request it is given before queueing it: a probe goes to two threads of its own, which serve
nothing else; every other request to the pool as before. The choice is made per request
(waitress re-dispatches a connection for each pipelined request), so a connection that
sends a probe and then a slow request has the slow one served by the pool. Probes stay
cheap (``/ready`` waits at most 0.9 s for its answer), so two threads keep up with any
probing rate an orchestrator uses. How it reaches into waitress is
:class:`plant_store.serving.waitress_loop.LaneDispatcher`'s.

**The probe port** (``probe_port``): under ``plant-store serve``, and in every worker of a
pre-fork server (uWSGI, and gunicorn with :mod:`plant_store.gunicorn_hooks`).
A probe on the service's port waits while every request thread waits (a locked table, a
database that has gone: gunicorn's threads take requests from one pool, uWSGI's take
connections themselves), or while clients hold every connection; an orchestrator would
restart processes that are alive. So the probe port is served by a waitress server of its
own, on threads nothing else uses (:func:`plant_store.serving.waitress_loop.serve_in_thread`),
answering only the two probes through the same app, with the service's defences: a
request must arrive whole within ``TIMEOUT`` seconds, idle connections are let go at
the limit, malformed HTTP gets the Error shape. Under gunicorn the master binds the port
once and every worker accepts from it (non-blocking, so no worker waits in ``accept`` for
a probe another took), so a worker that ends (recycled, reloaded) leaves no connection in
a queue of its own; each uWSGI worker binds it with ``SO_REUSEPORT``.

Started in each worker after the server forks it (uWSGI's ``postfork``, gunicorn's
``post_worker_init``; or at import, in a uWSGI worker, with ``--lazy-apps``), never in
the master, which must not open the store.

**Busy threads** (:class:`BusyThreads`): how many of a server's request threads are busy,
and since when, told by the app's calls themselves: for a server that says nothing of it
(granian), so that the probe port can say "not ready" while every thread has been held for
a while (a client trickling a body holds a thread with no deadline under granian: the
hostile pass on issue 42). Invariant: ``started`` holds one entry per call of the app not
yet returned, keyed by a token of its own; the oldest entry's age is how long the longest
call has run. No lock: adding and removing an int key, and copying the dict, are each one
step under the GIL (and under a free-threaded build's per-dict lock), and a call held two
locks a request (about 0.2 us, and a wait whenever sixteen threads met on it).
"""

import itertools
import logging
import socket
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from plant_store.http import errors
from plant_store.serving import waitress_loop
from plant_store.serving.waitress_loop import LaneDispatcher

if TYPE_CHECKING:  # WSGI's types, in typeshed only (wsgiref.types is 3.11's)
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

log = logging.getLogger("plant_store.probe_port")  # the name users filter on

PROBES = ("/health", "/ready")
PROBE_THREADS = 2
TIMEOUT = 2  # seconds a probe's request may take to arrive, and its answer to be taken
CONNECTIONS = 1000  # held at once; at the limit, those idle a second are let go


class ProbeLaneDispatcher(LaneDispatcher):
    """The request pool, plus a lane of :data:`PROBE_THREADS` threads for the probes."""

    def __init__(self, threads: int, prefix: str = "") -> None:
        # The app serves a probe's path with or without the prefix.
        super().__init__(threads, {*PROBES, *(prefix + path for path in PROBES)},
                         PROBE_THREADS)


def listen(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """The probe port's listening socket, non-blocking; ``reuse_port`` when each worker
    binds its own."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.create_server((host, port), family=family, reuse_port=reuse_port)
    listener.setblocking(False)
    return listener


def serve(app: Callable[..., Iterable[bytes]], listener: socket.socket,
          unready: Callable[[], str | None] = lambda: None) -> waitress_loop.Background:
    """Answer the probes of ``app`` on ``listener`` from threads of their own; stop with
    the result's ``stop()``. ``unready()``: why the server cannot take clients now (every
    connection held, say), or None; ``/ready`` answers 503 with it before asking the
    app, which knows only the store."""

    def probes_only(environ: "WSGIEnvironment",
                    start_response: "StartResponse") -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO"), environ.get("REQUEST_METHOD")
        if path not in PROBES:
            return _error(start_response, "404 Not Found",
                          "This port answers only GET /health and GET /ready.")
        if method not in ("GET", "HEAD"):  # as the service's port answers it
            return _error(start_response, "405 Method Not Allowed",
                          f"{path} answers GET and HEAD only.", [("Allow", "GET, HEAD")])
        if path == "/ready" and (reason := unready()):
            return _error(start_response, "503 Service Unavailable", reason)
        return app(environ, start_response)

    return waitress_loop.serve_in_thread(
        probes_only, listener, threads=PROBE_THREADS, request_timeout=TIMEOUT,
        connection_limit=CONNECTIONS, channel_timeout=10)


def _error(start_response: "StartResponse", status: str, message: str,
           headers: list[tuple[str, str]] | None = None) -> list[bytes]:
    body = errors.document(int(status[:3]), message)
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(body))), *(headers or [])])
    return [body]


def in_uwsgi_workers(app: Callable[..., Iterable[bytes]], host: str, port: int) -> None:
    """Serve the probes in each uWSGI worker; elsewhere say that the setting does nothing
    there (gunicorn's hooks start the port themselves, in each worker)."""
    try:
        import uwsgi  # only inside uWSGI
        from uwsgidecorators import postfork
    except ImportError:
        if "plant_store.gunicorn_hooks" not in sys.modules:
            log.warning("probe_port=%d is served under uWSGI and under gunicorn with "
                        "-c python:plant_store.gunicorn_hooks; nothing listens there under "
                        "this server", port)
        return

    def start() -> None:
        try:
            serve(app, listen(host, port, reuse_port=True))
        except OSError as exc:  # the worker serves on; only its probes have no port
            log.error("cannot answer probes on %s:%d: %s", host, port, exc.strerror)

    if uwsgi.worker_id() > 0:  # imported in a worker: --lazy-apps
        start()
    else:
        postfork(start)


BUSY_FOR = 1.0  # seconds every thread must have been busy before /ready says so


class BusyThreads:
    """The calls of a WSGI app in flight, as the server's front records them around each
    call (:func:`plant_store.serving.granian_adapter._front`: one step with its refusals,
    not a wrapper of its own, which cost 0.12 us a request), and :meth:`unready`."""

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self.tokens = itertools.count()  # a key of its own for each call
        self.started: dict[int, float] = {}  # token -> time.monotonic() at the call

    def running(self) -> tuple[list[float], bool]:
        """Seconds each call in flight has run, and whether every thread is busy."""
        now = time.monotonic()
        ages = [now - started for started in self.started.copy().values()]
        return ages, len(ages) >= self._threads

    def unready(self) -> str | None:
        """Why new requests wait (every thread busy for BUSY_FOR s or more), or None: the
        ``threads`` oldest calls in flight all began BUSY_FOR ago (the oldest alone said
        "not ready" while a thread was free now and then: the hostile pass on issue 52)."""
        started = sorted(self.started.copy().values())
        if len(started) < self._threads:
            return None
        if time.monotonic() - started[self._threads - 1] < BUSY_FOR:
            return None
        return (f"Every request thread ({self._threads}) has been busy for {BUSY_FOR:g} s "
                "or more: new requests wait for one.")
