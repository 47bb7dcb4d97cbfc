"""Deadlines on database work, enforced from the client side.

``statement_timeout`` is the server's bound, and it does not hold where it matters most: a
commit waiting for a synchronous standby that has gone, a frozen server, a network that
drops packets, a pooler that lost the setting. So each operation runs under a
:class:`Watchdog` entry with a deadline. Past it, the watchdog sends the server a cancel
request (the backend stops waiting: a statement is rolled back, a commit's wait for the
standby ends with a warning); if the operation still has not returned a second later (the
server does not answer at all), it shuts the connection's socket down, so the thread
blocked on it gets an error at once.

Invariants:

- The watchdog acts on a connection only while an operation holds it (between ``enter``
  and ``exit``), checked under its lock; so it never touches a connection that is back in
  the pool or lent to another operation.
- A connection the watchdog acted on is marked ``expired``, and its operation closes it
  instead of returning it to the pool: a cancel request that arrives late can never hit
  the next statement sent on it.
- One thread watches every deadline, waking at the earliest one; an operation costs a
  set insert and delete under one lock, and wakes the thread only when its deadline comes
  before the one the thread sleeps until (rarely: deadlines are now plus one timeout).
  Cancel requests are sent in parallel, a short-lived thread each, so connections
  expiring together are all cancelled at once.
"""

import contextlib
import math
import os
import socket
import threading
import time

import psycopg

GRACE = 1.0  # seconds between the cancel request and shutting the socket down
CANCEL_TIMEOUT = 0.5  # seconds the watchdog gives a cancel request to be delivered


class Entry:
    __slots__ = ("busy", "cancelled", "conn", "deadline", "expired", "released")

    def __init__(self, conn: psycopg.Connection, deadline: float) -> None:
        self.conn = conn
        self.deadline = deadline
        self.expired = False  # the watchdog acted: the connection must not be reused
        self.cancelled = False  # a cancel request was sent; next, the socket
        self.released = False  # the operation is over: its connection may be closed
        self.busy = threading.Lock()  # held while a cancel request uses the connection


class Watchdog:
    def __init__(self, name: str = "plant-store-deadlines") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._entries: set[Entry] = set()
        self._asleep_until = math.inf  # when the watching thread wakes next, if it waits
        self._thread: threading.Thread | None = None
        self._closed = False

    def enter(self, conn: psycopg.Connection, deadline: float) -> Entry:
        entry = Entry(conn, deadline)
        with self._lock:
            self._entries.add(entry)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._watch, name=self._name,
                                                daemon=True)
                self._thread.start()
            if deadline < self._asleep_until:  # most deadlines come after one it waits for
                self._wake.notify()
        return entry

    def exit(self, entry: Entry) -> bool:
        """Release ``entry``; True when the watchdog acted on it: the caller closes the
        connection (no cancel request is using it by then)."""
        with self._lock:
            self._entries.discard(entry)
            if not entry.expired:
                return False
        with entry.busy:
            entry.released = True
        return True

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
                due = [e for e in self._entries
                       if now >= (e.deadline + GRACE if e.cancelled else e.deadline)]
                if not due:
                    soonest = min((e.deadline + GRACE if e.cancelled else e.deadline
                                   for e in self._entries), default=now + 60)
                    self._asleep_until = soonest
                    self._wake.wait(max(0.001, soonest - now))
                    self._asleep_until = -math.inf  # awake: it looks at every entry anyway
                    continue
                for entry in due:
                    entry.expired = True
                to_cancel = [e for e in due if not e.cancelled]
                for entry in due:
                    if entry.cancelled:  # a second past the cancel, still blocked
                        self._entries.discard(entry)
                        _shut_down(entry.conn)
                    entry.cancelled = True
            for entry in to_cancel:  # outside the lock, each in a thread of its own: one
                # may take CANCEL_TIMEOUT (a frozen server), and in turn they would hold
                # back every later deadline (ten connections: five seconds)
                threading.Thread(target=_cancel, args=(entry,), daemon=True,
                                 name="plant-store-cancel").start()


def _cancel(entry: Entry) -> None:
    with entry.busy, contextlib.suppress(Exception):
        if not entry.released:
            entry.conn.cancel_safe(timeout=CANCEL_TIMEOUT)


def _shut_down(conn: psycopg.Connection) -> None:
    """Make every read and write on the connection's socket fail now, whoever is blocked
    on it; the file descriptor stays the connection's, to be closed by its owner."""
    with contextlib.suppress(Exception), socket.socket(fileno=os.dup(conn.fileno())) as sock:
        sock.shutdown(socket.SHUT_RDWR)  # closing the duplicate leaves the original open
