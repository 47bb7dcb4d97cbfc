"""A task queue that serves clients in turn by the CPU time their requests use, so one
client's flood of cheap (or costly) requests cannot starve another's creates.

waitress serves requests first come, first served: sixteen connections scraping
``/metrics`` kept every thread busy, and a create waited behind them all (4,000 creates/s
down to 130). Here each client has a queue of its own, and a free thread takes the next
task of the client that has used the least CPU so far (start-time fair queueing, with the
CPU each task took measured by the thread that ran it). A client that sends one cheap
request at a time is served almost at once, however many a flooder keeps queued.

Invariants (all under the dispatcher's lock, which waitress holds for ``append`` and
``popleft``; ``_charge`` takes it itself):

- every queued task is in exactly one client's deque, and every non-empty deque has
  exactly one entry in the heap, keyed by that client's virtual time: ``len`` is the sum
  of the deques' lengths;
- a client's virtual time is the CPU seconds its tasks were charged since it last had
  nothing queued, started at the virtual time of the last task taken (``_now``) when its
  queue was empty, so a client that was idle gains no credit to flood with later;
- a task taken is charged the client's running estimate of a task's cost at once (so a
  burst of one client's queued tasks is not all taken before the first is measured), and
  the difference when it has run. Estimates are kept for at most ``ESTIMATES`` clients,
  the least recently seen forgotten first.
"""

import collections
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

ESTIMATES = 4096  # clients whose cost per task is remembered
FIRST_ESTIMATE = 1e-4  # seconds of CPU a task of an unknown client is charged at first


class FairQueue:
    """The queue of a waitress task dispatcher (``append``, ``popleft``, ``len``), fair
    between the clients ``client_of(task)`` names."""

    def __init__(self, client_of: Callable[[Any], Hashable], lock: threading.Lock) -> None:
        self._client_of = client_of
        self._lock = lock
        self._queues: dict[Hashable, collections.deque[Any]] = {}
        self._virtual: dict[Hashable, float] = {}  # of clients with tasks queued
        self._heap: list[tuple[float, int, Hashable]] = []
        self._order = itertools.count()  # ties go to the client queued first
        self._now = 0.0
        self._len = 0
        self._estimates: collections.OrderedDict[Hashable, float] = collections.OrderedDict()

    def __len__(self) -> int:
        return self._len

    def append(self, task: Any) -> None:
        client = self._client_of(task)
        queue = self._queues.get(client)
        if queue is None:
            queue = self._queues[client] = collections.deque()
            start = self._virtual[client] = self._now
            heapq.heappush(self._heap, (start, next(self._order), client))
        queue.append(task)
        self._len += 1

    def popleft(self) -> "_Charged":
        while True:  # entries of clients charged since they were pushed are stale
            virtual, _, client = heapq.heappop(self._heap)
            if self._virtual.get(client) == virtual:
                break
        queue = self._queues[client]
        task = queue.popleft()
        self._len -= 1
        self._now = virtual
        estimate = self._estimates.get(client, FIRST_ESTIMATE)
        if queue:
            self._virtual[client] = virtual + estimate
            heapq.heappush(self._heap, (virtual + estimate, next(self._order), client))
        else:
            del self._queues[client], self._virtual[client]
        return _Charged(task, client, estimate, self)

    def _charge(self, client: Hashable, estimated: float, used: float) -> None:
        """Correct a client's virtual time by what its task used beyond the estimate,
        and move the estimate towards it."""
        with self._lock:
            estimates = self._estimates
            before = estimates.pop(client, FIRST_ESTIMATE)
            estimates[client] = before + (used - before) / 4
            if len(estimates) > ESTIMATES:
                estimates.popitem(last=False)
            virtual = self._virtual.get(client)
            if virtual is not None and used != estimated:
                virtual = self._virtual[client] = max(self._now, virtual + used - estimated)
                heapq.heappush(self._heap, (virtual, next(self._order), client))


class _Charged:
    """A task taken from the queue, which charges its client the CPU it used when run."""

    __slots__ = ("_client", "_estimate", "_queue", "task")

    def __init__(self, task: Any, client: Hashable, estimate: float,
                 queue: FairQueue) -> None:
        self.task, self._client, self._estimate, self._queue = task, client, estimate, queue

    def service(self) -> None:
        started = time.thread_time()
        try:
            self.task.service()
        finally:
            self._queue._charge(self._client, self._estimate, time.thread_time() - started)

    def cancel(self) -> None:
        self.task.cancel()

    def __repr__(self) -> str:
        return repr(self.task)
