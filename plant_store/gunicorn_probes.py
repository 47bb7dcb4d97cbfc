"""Probes that never queue behind requests under gunicorn: its threaded worker with a lane
of its own for ``GET /health`` and ``GET /ready`` (as probe_lane.py does for waitress).

gunicorn's ``gthread`` worker hands each readable connection to one pool of ``--threads``
threads; when all of them wait (a locked table, a database that has gone), a probe waits
its turn behind them. Here the worker peeks at the request line (``MSG_PEEK``: nothing is
consumed, gunicorn's parser reads it as before) when a connection becomes readable, and a
probe goes to two threads of its own. Use it as gunicorn's worker class::

    gunicorn -c python:plant_store.gunicorn_hooks plant_store.wsgi:application

(``gunicorn_hooks`` names it), or ``-k plant_store.gunicorn_probes.ProbeLaneWorker``.

Invariants: the choice is made for each request as its first bytes arrive (a keep-alive
connection is looked at again for its next one); anything that cannot be read as a plain
HTTP request line (TLS, a line split across packets) goes to the request pool as before.
Relies on gunicorn's ``ThreadWorker.enqueue_req`` and ``_wrap_future``, hence its bounded
version.
"""

import contextlib
import socket
import time
from concurrent import futures

from gunicorn.workers.gthread import ThreadWorker

from plant_store.probe_lane import PROBE_THREADS, PROBES

_TARGETS = tuple(path.encode() for path in PROBES)


def is_probe(head: bytes) -> bool:
    """Whether ``head``, a request's first bytes, is a GET or HEAD of a probe's path (under
    any prefix: a path merely ending so answers as cheaply)."""
    method, _, rest = head.partition(b" ")
    target = rest.split(b" ", 1)[0].split(b"?", 1)[0]
    return method in (b"GET", b"HEAD") and target.endswith(_TARGETS)


class ProbeLaneWorker(ThreadWorker):
    """Also recycles cleanly under ``--max-requests``: gunicorn's threaded worker stops its
    loop at once, dropping connections it has accepted but not yet read (their clients get
    a reset); this one stops accepting, serves those (each answer closing its connection),
    and stops when none is left, or after gunicorn's ``graceful_timeout`` (a client that
    connected and never sends cannot keep it)."""

    def init_process(self) -> None:
        self._probes = futures.ThreadPoolExecutor(PROBE_THREADS,
                                                  thread_name_prefix="plant-store-probe")
        self._draining = 0.0  # since when (monotonic) it serves what it accepted, then ends
        self._signalled = False
        super().init_process()

    def handle_exit(self, sig, frame) -> None:
        self._signalled = True
        super().handle_exit(sig, frame)

    def handle_request(self, req, conn):
        keepalive = super().handle_request(req, conn)
        if self.nr >= self.max_requests and not self._signalled:
            self.alive = True  # not yet: drain first (see notify)
            if not self._draining:
                self._draining = time.monotonic()
                with self._lock:
                    for sock in self.sockets:
                        with contextlib.suppress(KeyError, ValueError, OSError):
                            self.poller.unregister(sock)
        return keepalive

    def notify(self) -> None:
        super().notify()
        if self._draining and (
                self.nr_conns <= 0  # every accepted connection closed
                or time.monotonic() - self._draining > self.cfg.graceful_timeout):
            self.alive = False  # (or one that never sends holds it no longer than that)

    def enqueue_req(self, conn) -> None:
        head = b""
        if not self.cfg.is_ssl:
            with contextlib.suppress(OSError, ValueError):
                head = conn.sock.recv(256, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        if not is_probe(head):
            super().enqueue_req(conn)
            return
        conn.init()
        self._wrap_future(self._probes.submit(self.handle, conn), conn)
