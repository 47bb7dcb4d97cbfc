"""Probes that never queue behind requests: waitress's task dispatcher with a lane of its own
for ``GET /health`` and ``GET /ready``.

waitress hands each parsed request to one queue served by ``threads`` threads. When every
thread waits (on a table lock, a database that has gone, each bounded by
``database_timeout``), a probe would wait its turn behind the queue, and an orchestrator
probing with a 1 s timeout would restart a process that is alive, or take a ready one out.
So the dispatcher looks at the request it is given before queueing it: a probe goes to two
threads of its own, which serve nothing else; every other request to the pool as before.

Invariants: the choice is made per request (waitress re-dispatches a connection for each
pipelined request), so a connection that sends a probe and then a slow request has the
slow one served by the pool. Probes stay cheap (``/ready`` waits at most 0.9 s for its
answer), so two threads keep up with any probing rate an orchestrator uses.

This relies on waitress's ``create_server(_dispatcher=...)`` and ``channel.requests``,
which is why setup.cfg bounds waitress's version.
"""

import logging

from waitress.task import Task, ThreadedTaskDispatcher
from waitress.utilities import queue_logger

from plant_store.logs import Throttle

PROBES = ("/health", "/ready")
PROBE_THREADS = 2
QUEUE_WARNING_EVERY = 10.0  # seconds: the most often waitress's queue warning is logged


class _QueueLog:
    """waitress warns "Task queue depth is N" for every request that finds every thread
    busy: under load nearly every request, each line formatted and written by waitress's
    I/O thread, the one that reads every request (a tenth of a loaded PostgreSQL instance's
    creates/s, measured). The warning stays, at most once per QUEUE_WARNING_EVERY seconds,
    saying how many were held back."""

    def __init__(self) -> None:
        self._throttle = Throttle(QUEUE_WARNING_EVERY)

    def warning(self, message: str, *args: object) -> None:
        self._throttle.log(queue_logger, logging.WARNING, message, *args)


class ProbeLaneDispatcher(ThreadedTaskDispatcher):
    """The request pool, plus a lane of :data:`PROBE_THREADS` threads for the probes."""

    def __init__(self, threads: int, prefix: str = "") -> None:
        super().__init__()
        self.queue_logger = _QueueLog()  # type: ignore[assignment]  # waitress calls warning()
        self.set_thread_count(threads)
        # waitress serves a probe's path with or without the prefix
        self._paths = frozenset(PROBES) | {prefix + path for path in PROBES}
        self._probes = ThreadedTaskDispatcher()
        self._probes.set_thread_count(PROBE_THREADS)

    def add_task(self, task: Task) -> None:
        requests = getattr(task, "requests", None)
        request = requests[0] if requests else None  # a parsed request; maybe a bad one
        if (getattr(request, "command", None) in ("GET", "HEAD")
                and getattr(request, "path", None) in self._paths):
            self._probes.add_task(task)
        else:
            super().add_task(task)

    def shutdown(self, cancel_pending: bool = True, timeout: int = 5) -> bool:
        done = super().shutdown(cancel_pending, timeout)
        self._probes.shutdown(cancel_pending, 1)
        return done
