"""``/health`` and ``/ready`` on a port of their own in every worker of a pre-fork server
(``probe_port``): uWSGI, and gunicorn with :mod:`plant_store.gunicorn_hooks`.

Both servers' request threads take connections (uWSGI) or requests (gunicorn's
``gthread``) from one pool: while every thread of every worker waits (a locked table, a
database that has gone), a probe on the service's port waits too, and an orchestrator
would restart processes that are alive. So each worker also listens on ``probe_port``,
served by threads that nothing else uses (one per probe connection, at most
``CONNECTIONS`` at once, each given ``TIMEOUT`` seconds), answering only the two probes
through the same app. Under gunicorn the master binds the port once and every worker
accepts from it, so a worker that ends (recycled, reloaded) leaves no connection behind in
a queue of its own; each uWSGI worker binds it with ``SO_REUSEPORT``. Each answers for
itself. ``plant-store serve`` needs none of this: its probes have threads of their own on
the service's port (probe_lane.py).

Started in each worker after the server forks it (uWSGI's ``postfork``, gunicorn's
``post_worker_init``; or at import, in a uWSGI worker, with ``--lazy-apps``), never in
the master, which must not open the store.
"""

import logging
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from plant_store import errors
from plant_store.probe_lane import PROBES

if TYPE_CHECKING:  # WSGI's types, in typeshed only (wsgiref.types is 3.11's)
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

log = logging.getLogger(__name__)


CONNECTIONS = 32  # probe connections served at once; more are closed unanswered
TIMEOUT = 2.0  # seconds a probe connection may take to send its request or take the answer


class ProbeServer(socketserver.ThreadingMixIn, WSGIServer):
    """A thread per connection, but never more than CONNECTIONS: a flood of idle
    connections costs a bounded number of threads, each freed after TIMEOUT."""

    daemon_threads = True  # a probe in flight never holds the worker's exit
    block_on_close = False

    def __init__(self, listener: socket.socket) -> None:
        super().__init__(listener.getsockname()[:2], _Quiet, bind_and_activate=False)
        self.socket.close()
        self.socket = listener
        host, self.server_port = listener.getsockname()[:2]
        self.server_address = (host, self.server_port)
        self.server_name = socket.getfqdn(host)
        self.setup_environ()
        self._slots = threading.BoundedSemaphore(CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def stop(self) -> None:
        """Take no more connections (the listener stays open: under gunicorn it is the
        master's, shared by every worker) and wait up to TIMEOUT for those in flight."""
        self.shutdown()
        until = time.monotonic() + TIMEOUT
        for _ in range(CONNECTIONS):
            if not self._slots.acquire(timeout=max(0.0, until - time.monotonic())):
                break


class _Quiet(WSGIRequestHandler):
    timeout = TIMEOUT  # a client that sends slowly, or never reads, lets go of its thread

    def log_message(self, *args: object) -> None:
        pass  # the app's access log has the line


def listen(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """The probe port's listening socket; ``reuse_port`` when each worker binds its own."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, reuse_port=reuse_port)


def serve(app: Callable[..., Iterable[bytes]], listener: socket.socket) -> ProbeServer:
    """Answer the probes of ``app`` on ``listener`` from a daemon thread; return the
    server."""

    def probes_only(environ: "WSGIEnvironment",
                    start_response: "StartResponse") -> Iterable[bytes]:
        if (environ.get("PATH_INFO") in PROBES
                and environ.get("REQUEST_METHOD") in ("GET", "HEAD")):
            return app(environ, start_response)
        body = errors.document(404, "This port answers only GET /health and GET /ready.")
        start_response("404 Not Found", [("Content-Type", "application/json"),
                                         ("Content-Length", str(len(body)))])
        return [body]

    server = ProbeServer(listener)
    server.set_app(probes_only)
    threading.Thread(target=server.serve_forever, name="plant-store-probes",
                     daemon=True).start()
    return server


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
