"""Probes that never queue behind requests under gunicorn: its threaded worker with a lane
of its own for ``GET /health`` and ``GET /ready`` (as probe_lane.py does for waitress).

gunicorn's ``gthread`` worker hands each readable connection to one pool of ``--threads``
threads; when all of them wait (a locked table, a database that has gone), a probe waits
its turn behind them. Here the worker peeks at the request line (``MSG_PEEK``: nothing is
consumed, gunicorn's parser reads it as before) when a connection becomes readable, and a
probe goes to two threads of its own. Use it as gunicorn's worker class::

    gunicorn -c python:plant_store.gunicorn_hooks plant_store.wsgi:application

(``gunicorn_hooks`` names it), or ``-k plant_store.gunicorn_probes.ProbeLaneWorker``.

Invariants: the choice is made for each request as its bytes arrive (a keep-alive
connection is looked at again for its next one); only a whole probe (its headers ended)
goes to the probe threads, and anything else (TLS, a request still arriving) to the
request pool as before.
Relies on gunicorn's ``ThreadWorker.enqueue_req`` and ``_wrap_future``, hence its bounded
version.
"""

import collections
import contextlib
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures

from gunicorn.http import RequestParser
from gunicorn.workers.gthread import TConn, ThreadWorker

from plant_store.probe_lane import PROBE_THREADS, PROBES

_TARGETS = tuple(path.encode() for path in PROBES)


PEEK = 2048  # bytes looked at: a probe's whole head, as orchestrators send it


def is_probe(head: bytes) -> bool:
    """Whether ``head``, a request's first bytes, is a whole GET or HEAD of a probe's path
    (under any prefix: a path merely ending so answers as cheaply). Whole: its headers have
    ended, so a probe thread never waits for a client that sends slowly (two such clients
    would hold both); a probe that arrives in pieces is served by the request threads."""
    headers, ended, _ = head.partition(b"\r\n\r\n")
    lowered = headers.lower()
    if not ended or b"\ncontent-length:" in lowered or b"\ntransfer-encoding:" in lowered:
        return False  # still arriving, or with a body the probe thread might wait for
    method, _, rest = head.partition(b" ")
    target = rest.split(b" ", 1)[0].split(b"?", 1)[0]
    return method in (b"GET", b"HEAD") and target.endswith(_TARGETS)


class ProbeLaneWorker(ThreadWorker):
    """Also recycles without dropping connections under ``--max-requests``: gunicorn's
    threaded worker stops its loop at once, and a connection it has accepted but not yet
    read gets a reset. This one counts requests itself (gunicorn's own count is disarmed,
    so no thread can stop the loop under the others); at the limit it stops accepting,
    answers each request it still gets with ``Connection: close``, closes idle keep-alive
    connections, and ends when none is left, or after ``graceful_timeout`` (a client that
    connected and never sends cannot keep it)."""

    # ThreadWorker's own, as read in gunicorn 23, which typeshed's stub leaves out.
    _lock: "threading.RLock"
    _keep: "collections.deque[TConn]"
    _wrap_future: "Callable[[futures.Future[tuple[bool, TConn]], TConn], None]"

    def init_process(self) -> None:
        self._probes = futures.ThreadPoolExecutor(PROBE_THREADS,
                                                  thread_name_prefix="plant-store-probe")
        self._recycle_at, self.max_requests = self.max_requests, sys.maxsize
        self._draining = 0.0  # since when (monotonic) it serves what it accepted, then ends
        self._waker = socket.socketpair()  # wakes the loop's select (1 s) while draining
        for end in self._waker:
            end.setblocking(False)
        super().init_process()

    def run(self) -> None:
        self.poller.register(self._waker[0], selectors.EVENT_READ, self._woken)
        super().run()

    def _woken(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.recv(4096)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._waker[1].send(b"x")

    def finish_request(self, fs: "futures.Future[tuple[bool, TConn]]") -> None:
        super().finish_request(fs)
        if self._draining:
            self._wake()  # perhaps the last connection: the loop looks at once

    def handle_request(self, req: RequestParser, conn: TConn) -> bool:
        keepalive = super().handle_request(req, conn)
        if self.nr >= self._recycle_at and self.alive:
            if not self._draining:
                self.log.info("Autorestarting worker once its connections are answered.")
                self._draining = time.monotonic()
                with self._lock:
                    for sock in self.sockets:
                        with contextlib.suppress(KeyError, ValueError, OSError):
                            self.poller.unregister(sock)
                self._wake()
            return False  # this connection closes after its answer
        return keepalive

    def notify(self) -> None:
        super().notify()
        if not self._draining:
            return
        with self._lock:  # idle keep-alive connections: nothing is in flight on them
            idle, self._keep = list(self._keep), collections.deque()
            for conn in idle:
                with contextlib.suppress(KeyError, ValueError, OSError):
                    self.poller.unregister(conn.sock)
        for conn in idle:
            self.nr_conns -= 1
            conn.close()
        if (self.nr_conns <= 0  # every accepted connection answered and closed
                or time.monotonic() - self._draining > self.cfg.graceful_timeout):
            self.alive = False

    def enqueue_req(self, conn: TConn) -> None:
        head = b""
        if not self.cfg.is_ssl:
            with contextlib.suppress(OSError, ValueError):
                head = conn.sock.recv(PEEK, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        if not is_probe(head):
            super().enqueue_req(conn)
            return
        conn.init()
        self._wrap_future(self._probes.submit(self.handle, conn), conn)
