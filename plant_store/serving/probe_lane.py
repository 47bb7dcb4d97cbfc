"""Probes that never queue behind requests: under ``plant-store serve``, waitress's task
dispatcher with a lane of its own for ``GET /health`` and ``GET /ready``.

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

How it reaches into waitress is plant_store.serving.waitress_loop's (LaneDispatcher).
"""

from plant_store.serving.waitress_loop import LaneDispatcher

PROBES = ("/health", "/ready")
PROBE_THREADS = 2


class ProbeLaneDispatcher(LaneDispatcher):
    """The request pool, plus a lane of :data:`PROBE_THREADS` threads for the probes."""

    def __init__(self, threads: int, prefix: str = "") -> None:
        # The app serves a probe's path with or without the prefix.
        super().__init__(threads, {*PROBES, *(prefix + path for path in PROBES)},
                         PROBE_THREADS)
