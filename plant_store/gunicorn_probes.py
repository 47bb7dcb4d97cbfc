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
    def init_process(self) -> None:
        self._probes = futures.ThreadPoolExecutor(PROBE_THREADS,
                                                  thread_name_prefix="plant-store-probe")
        super().init_process()

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
