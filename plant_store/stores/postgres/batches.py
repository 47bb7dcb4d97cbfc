"""Concurrent calls combined into batches: the JSON file's group commit, applied to the
database, so that sixteen creates cost one statement and one commit instead of sixteen.

A call joins the queue. If fewer than ``running`` batches are under way, it leads at once
(so a lone caller waits for nobody): it takes the queue from its front, itself first, up
to ``limit`` calls, runs them as one batch, answers each member, and passes the lead to
the oldest call still queued, if any. Any other call waits on its own lock until a leader
answers it or hands it the lead, or until it has waited ``patience`` seconds: then it leads
a batch of its own beside the running ones, so that slow batches (a slow commit, a lock
waited for) are not a queue every other call must wait through.

Invariants, all under ``_lock``:

1. The queue is empty unless at least ``running`` batches are under way: a call queues only
   when they are, and a leader that finds the queue empty counts itself out. An impatient
   call counts itself in when it leads.
2. A call is answered exactly once, by the batch it was taken into, or it leads a batch
   that includes it: a call is marked ``taken`` as it leaves the queue (into a batch, or
   handed the lead), so no second leader picks it and an impatient call leads only while
   it is still queued; its batch is itself plus the queue's front.
3. Every member of a batch is answered whatever the batch function does (an exception it
   raises, BaseException included, is every member's answer), and the lead is passed on
   before the leader returns: no call is left waiting for a batch nobody runs.
4. Batches leave the queue in arrival order, and members keep that order in their batch:
   a call answered before another was made is in an earlier batch.

How long a call waits is the batch function's business: it bounds each batch (the
store's deadline), so a queued call waits at most for the batches ahead of it and its own.
"""

import _thread
import collections
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class _Call(Generic[T, R]):
    __slots__ = ("answer", "error", "item", "lead", "taken", "wake")

    def __init__(self, item: T) -> None:
        self.item = item
        self.answer: R | None = None
        self.error: BaseException | None = None
        self.lead = False  # leads a batch (at once, handed the lead, or impatient)
        self.taken = False  # off the queue: into a batch, or handed the lead
        self.wake = _thread.allocate_lock()  # held until the call is answered or leads
        self.wake.acquire()


class Batcher(Generic[T, R]):
    def __init__(self, run: Callable[[list[T]], Sequence[R | BaseException]], *,
                 limit: int, running: int = 1, patience: float = 0.05) -> None:
        """``run(items)`` answers each item, in order, with a result or an exception to
        raise in that item's caller; it may also raise, for all of them."""
        self._run = run
        self._limit = limit
        self._patience = patience
        self._running_max = running
        self._running = 0
        self._queue: collections.deque[_Call[T, R]] = collections.deque()
        self._lock = threading.Lock()

    def submit(self, item: T) -> R:
        call: _Call[T, R] = _Call(item)
        with self._lock:
            if self._running < self._running_max:
                self._running += 1
                call.lead = True
            else:
                self._queue.append(call)
        if not call.lead and not call.wake.acquire(timeout=self._patience):
            with self._lock:
                if not call.taken:  # still queued: lead a batch beside the running ones
                    self._queue.remove(call)
                    call.taken = call.lead = True
                    self._running += 1
            if not call.lead:
                call.wake.acquire()  # released once: answered, or handed the lead
        if call.lead:
            self._lead(call)
        if call.error is not None:
            raise call.error
        return call.answer  # type: ignore[return-value]  # set when error is None

    def _lead(self, call: _Call[T, R]) -> None:
        with self._lock:
            batch = [call]
            while self._queue and len(batch) < self._limit:
                member = self._queue.popleft()
                member.taken = True
                batch.append(member)
        try:
            answers = self._run([member.item for member in batch])
            if len(answers) != len(batch):
                raise AssertionError(f"{len(answers)} answers for {len(batch)} calls")
        except BaseException as exc:  # every member is answered, whatever happened
            answers = [exc] * len(batch)
        for member, answer in zip(batch, answers, strict=True):
            if isinstance(answer, BaseException):
                member.error = answer
            else:
                member.answer = answer
        with self._lock:
            if self._queue:
                successor = self._queue.popleft()
                successor.taken = successor.lead = True
                successor.wake.release()
            else:
                self._running -= 1
        for member in batch[1:]:  # the leader, batch[0], is answered by returning
            member.wake.release()
