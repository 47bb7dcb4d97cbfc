"""``/health`` and ``/ready`` on a port of their own in every uWSGI worker (``probe_port``).

uWSGI's threads each take connections from the socket themselves: while every thread of
every worker waits (a locked table, a database that has gone), nothing accepts a probe on
the service's port, and an orchestrator would restart processes that are alive. So each
worker also listens on ``probe_port``, served by threads that nothing else uses (one per
probe connection), answering only the two probes through the same app. The workers share
the port (``SO_REUSEPORT``); each answers for itself. ``plant-store serve`` and gunicorn
with ``plant_store.gunicorn_hooks`` need none of this: their probes have threads of their
own on the service's port (probe_lane.py, gunicorn_probes.py).

Started in each worker after uWSGI forks it (or at import, in a worker, with
``--lazy-apps``), never in the master, which must not open the store.
"""

import logging
import socket
import socketserver
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from plant_store import errors
from plant_store.probe_lane import PROBES

if TYPE_CHECKING:  # WSGI's types, in typeshed only (wsgiref.types is 3.11's)
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

log = logging.getLogger(__name__)


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a probe in flight never holds the worker's exit

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # every worker
        super().server_bind()


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass  # the app's access log has the line


def serve(app: Callable[..., Iterable[bytes]], host: str, port: int) -> WSGIServer:
    """Answer the probes of ``app`` on ``host``:``port`` from a daemon thread; return the
    server (its ``server_port`` is the port, when 0 asked for a free one)."""

    def probes_only(environ: "WSGIEnvironment",
                    start_response: "StartResponse") -> Iterable[bytes]:
        if (environ.get("PATH_INFO") in PROBES
                and environ.get("REQUEST_METHOD") in ("GET", "HEAD")):
            return app(environ, start_response)
        body = errors.document(404, "This port answers only GET /health and GET /ready.")
        start_response("404 Not Found", [("Content-Type", "application/json"),
                                         ("Content-Length", str(len(body)))])
        return [body]

    server = make_server(host, port, probes_only, server_class=_Server, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="plant-store-probes",
                     daemon=True).start()
    return server


def in_uwsgi_workers(app: Callable[..., Iterable[bytes]], host: str, port: int) -> None:
    """Serve the probes in each uWSGI worker; outside uWSGI say that the setting does
    nothing there."""
    try:
        import uwsgi  # only inside uWSGI
        from uwsgidecorators import postfork
    except ImportError:
        log.warning("probe_port=%d is for uWSGI; this server has probe threads of its own "
                    "(or none): nothing listens there", port)
        return

    def start() -> None:
        try:
            serve(app, host, port)
        except OSError as exc:  # the worker serves on; only its probes have no port
            log.error("cannot answer probes on %s:%d: %s", host, port, exc.strerror)

    if uwsgi.worker_id() > 0:  # imported in a worker: --lazy-apps
        start()
    else:
        postfork(start)
