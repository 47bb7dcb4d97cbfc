"""Threads that serve several callers, each mechanism with its invariants in its docstring:
one computation shared by the callers waiting for it (:class:`SingleFlight`), concurrent
calls combined into batches (:class:`Batcher`), and deadlines watched by one thread that acts
on work outliving them (:class:`Watchdog`)."""

import _thread
import collections
import contextlib
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class SingleFlight(Generic[T]):
    """Calls ``compute`` for its callers, at most once at a time: many concurrent scrapes of
    ``/metrics`` cost about one exposition at a time, not one each.

    Invariants:

    - At most one computation runs at a time.
    - A caller's result comes from a computation that started after the caller arrived, so
      it is never older than the request: a caller arriving while one runs waits for the
      next one, which it starts itself or shares with the others that waited.
    - Computations are numbered as they start; ``_finished`` is the number of the last
      that succeeded and ``_result`` its result. A caller arriving when ``_started`` was
      n takes the result once ``_finished > n``.
    - A computation that raises raises in its own caller only; those waiting for it start
      another (one of them), as if it had not run.
    """

    def __init__(self, compute: Callable[[], T]) -> None:
        self._compute = compute
        self._changed = threading.Condition(threading.Lock())
        self._running = False
        self._started = 0
        self._finished = 0
        self._result: T | None = None

    def __call__(self) -> T:
        with self._changed:
            wanted = self._started + 1
            while self._finished < wanted:
                if not self._running:
                    self._running = True
                    self._started += 1
                    number = self._started
                    break
                self._changed.wait()
            else:
                return self._result  # type: ignore[return-value]  # set with _finished
        try:
            result = self._compute()
        except BaseException:
            with self._changed:
                self._running = False
                self._changed.notify_all()
            raise
        with self._changed:
            self._running = False
            self._finished, self._result = number, result
            self._changed.notify_all()
        return result


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


class Watched:
    """One piece of work a :class:`Watchdog` watches: its steps, and how far it got."""

    __slots__ = ("acted", "busy", "deadline", "released", "steps", "taken")

    def __init__(self, deadline: float, steps: tuple[Callable[[], object], ...]) -> None:
        self.deadline = deadline  # of the next step (monotonic)
        self.steps = steps
        self.taken = 0  # steps the watchdog has started
        self.acted = False  # a step was taken: what it acted on must not be reused
        self.released = False  # exit() returned: no step may touch the work any more
        self.busy = threading.Lock()  # held while a step runs


class Watchdog:
    """Acts on work that outlives its deadline, from outside the thread blocked in it: the
    PostgreSQL store's statements (a cancel request, then the socket shut down ``grace``
    seconds later) and a webhook's POST (its socket shut down). A socket timeout bounds one
    operation, ``statement_timeout`` is the server's and does not hold when the server or
    the network is what is stuck: only a thread of its own can bound the whole.

    ``enter(deadline, *steps)`` watches one piece of work: at ``deadline`` the watchdog
    takes ``steps[0]()``, ``grace`` seconds later ``steps[1]()``, and so on, each only
    while the work is still entered; ``exit`` ends the watch.

    Invariants:

    - A step runs only between ``enter`` and ``exit``: it holds the entry's ``busy`` lock
      and checks, under it, that the entry is not released; ``exit`` of an entry acted on
      takes that lock to release it. So once ``exit`` has returned no step runs or will
      run, and what the steps act on may be closed and its descriptor reused.
    - An entry a step was taken on is marked ``acted`` (under the watchdog's lock, before
      the step starts), and ``exit`` says so: the caller then closes what was acted on
      instead of reusing it (a cancel request arriving late must not hit the next
      statement sent on a connection).
    - One thread watches every deadline, waking at the earliest one; an entry costs a set
      insert and delete under one lock, and wakes the thread only when its deadline comes
      before the one the thread sleeps until. Each step runs in a short-lived thread of its
      own, so one that blocks (a cancel request to a frozen server) holds back no later
      deadline, and entries expiring together are acted on at once. A step's error is
      ignored: what it acts on may be gone already.
    - ``again(entry)`` takes the last step taken again, if any, while the entry is entered:
      for work whose target changed as the step ran (a socket made while it looked for
      one). A step is taken at most once by the watchdog, but may run again so: steps are
      idempotent.
    """

    def __init__(self, name: str = "plant-store-deadlines", *, grace: float = 1.0) -> None:
        self._name = name
        self._grace = grace
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._entries: set[Watched] = set()
        self._asleep_until = math.inf  # when the watching thread wakes next, if it waits
        self._thread: threading.Thread | None = None
        self._closed = False

    def enter(self, deadline: float, *steps: Callable[[], object]) -> Watched:
        entry = Watched(deadline, steps)
        with self._lock:
            self._entries.add(entry)
            if not self._closed and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._watch, name=self._name,
                                                daemon=True)
                self._thread.start()
            if deadline < self._asleep_until:  # most deadlines come after one it waits for
                self._wake.notify()
        return entry

    def exit(self, entry: Watched) -> bool:
        """End the watch of ``entry``; True when a step was taken on it (and none runs
        any more): the caller closes what it acted on."""
        with self._lock:
            self._entries.discard(entry)
            if not entry.acted:
                return False
        with entry.busy:
            entry.released = True
        return True

    def again(self, entry: Watched) -> None:
        if entry.taken:
            self._step(entry, entry.steps[entry.taken - 1])

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify()

    def _watch(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                now = time.monotonic()
                due = [entry for entry in self._entries if now >= entry.deadline]
                if not due:
                    soonest = min((entry.deadline for entry in self._entries),
                                  default=now + 60)
                    self._asleep_until = soonest
                    self._wake.wait(max(0.001, soonest - now))
                    self._asleep_until = -math.inf  # awake: it looks at every entry anyway
                    continue
                taken = []
                for entry in due:
                    entry.acted = True
                    taken.append((entry, entry.steps[entry.taken]))
                    entry.taken += 1
                    if entry.taken == len(entry.steps):
                        self._entries.discard(entry)  # nothing more to take
                    else:
                        entry.deadline += self._grace
            for entry, step in taken:  # outside the lock, each in a thread of its own
                threading.Thread(target=self._step, args=(entry, step), daemon=True,
                                 name=f"{self._name}-step").start()

    @staticmethod
    def _step(entry: Watched, step: Callable[[], object]) -> None:
        with entry.busy, contextlib.suppress(Exception):
            if not entry.released:
                step()
