"""An append-only file with group commit, rollback and a swap of files: the mechanism under
the JSON-file store, apart from what its lines mean.

Invariants, all under ``cond`` (the caller holds it around ``commit``, ``commit_many``,
``wait_for``, ``wait_for_all``, ``sync`` and ``swap``; the log lets go of it only while a
group is written and fsynced):

1. Every appended line (or batch of lines, ``commit_many``: one ticket, each of its keys
   pending) is a :class:`Ticket` in ``_pending``, in append order, until its fate is set,
   once: durable (an fsync that started after the line was written succeeded) or dropped
   (a rollback removed it). A waiter waits on its own ticket, never on a file
   offset, so nothing a swap or a rollback does to offsets can strand it.
2. ``_size`` is the file's length and ``_durable_size`` how much of it is known to be on
   disk, whenever no group is being written (``_syncing``); every pending line is yet to be
   written. The thread that runs the fsync first writes the lines of every pending ticket,
   in order, in one ``write``: one system call a group rather than one a line, each of
   which let go of the GIL while holding ``cond``'s lock.
3. At most one fsync runs at a time (``_syncing``). It covers the tickets pending when it
   started and, when it succeeds, makes exactly those durable. When it or the group's write
   fails, every pending ticket is dropped (undone newest first, the file cut back to
   ``_durable_size``): the kernel may have discarded any of their pages.
   A writer waits on its ticket's ``batch``: the condition (on ``cond``'s lock) of the
   fsync that will cover it, so an fsync's end wakes the writers it settled, and one writer
   of the next batch to run the next fsync, not every writer waiting.
4. After each fsync the path is checked to still name the open file: a line is never
   acknowledged into a file that was deleted or replaced under the running server.
5. A swap (compaction) happens only when settled: nothing pending, no fsync running, and
   new appends held back (``_draining``) until it is done.
6. Once broken (a cut-back or a swap that could not be made durable, a file deleted under
   us, a fork), every change is refused until a restart reopens the file.
"""

import collections
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol

from plant_store.logs import Throttle
from plant_store.stores import lock
from plant_store.stores.base import StoreUnavailable
from plant_store.util import at_fork
from plant_store.util.files import fsync_dir

log = logging.getLogger("plant_store.stores.appendlog")  # the name users filter on


class Syscalls(Protocol):
    """The system calls of the write paths: the store's seams for fault-injection tests."""

    def _write(self, fd: int, data: bytes) -> int: ...
    def _fsync_fd(self, fd: int) -> None: ...
    def _replace(self, src: str, dst: str) -> None: ...


class Ticket:
    """One appended line, or lines: their keys, how to undo their change, the batch whose
    fsync will settle them, and their fate (None: pending)."""

    __slots__ = ("batch", "durable", "keys", "line", "undo")

    def __init__(self, keys: Sequence[Hashable], undo: Callable[[], None],
                 batch: threading.Condition, line: bytes) -> None:
        self.keys, self.undo, self.batch, self.line = keys, undo, batch, line
        self.durable: bool | None = None


class AppendLog:
    """An append-only file with group commit, rollback and a swap (the module's invariants)."""

    def __init__(self, path: str, fd: int, syscalls: Syscalls, *, fsync: bool = True,
                 lock_fd: int = -1, on_sync: Callable[[float], None] = lambda seconds: None,
                 ) -> None:
        """``lock_fd``: the data directory's lock, closed with the file (``lock.hold``).
        ``on_sync(seconds)``: told each successful group commit's time (for the metrics)."""
        self.path = path
        self.fd = fd
        self._lock_fd = lock_fd
        self._sys = syscalls
        self._fsync = fsync
        self._owner = at_fork.Owner()  # the opener: no other process writes
        self._size = self._durable_size = os.fstat(fd).st_size
        self._identity = _identity(os.fstat(fd))
        self.renew_lock()
        self._pending: collections.deque[Ticket] = collections.deque()
        self._by_key: dict[Hashable, Ticket] = {}  # the newest pending ticket of each key
        self._syncing = False
        self._draining = False
        self.broken: str | None = None
        self._failures = Throttle(10.0)
        self._failure = ("", "")  # the last failed group's message and cause
        self._on_sync = on_sync

    def renew_lock(self) -> threading.Condition:
        """A new ``cond`` (and batch), on a new lock: after a fork, where another thread
        may have held the old one."""
        lock = threading.Lock()
        self.cond = threading.Condition(lock)
        self._next = threading.Condition(lock)  # the batch the next fsync covers
        self._spare = threading.Condition(lock)  # two batches at most: one being synced
        return self.cond

    # Called with cond held.

    def commit(self, line: bytes, key: Hashable, apply: Callable[[], Callable[[], None]]) -> None:
        """Append ``line``, ``apply`` its change, and return once the line is durable; the
        change is undone (by what ``apply`` returned) and StoreUnavailable raised if the
        write or its fsync fails. A change ``apply`` refuses leaves no line: none is written
        before it is applied."""
        self._check_writable()
        self._wait_durable(Ticket((key,), apply(), self._next, line))

    def commit_many(self, apply: Callable[[], tuple[list[bytes], Sequence[Hashable],
                                                      Callable[[], None]]]) -> None:
        """``commit`` for a batch: ``apply`` makes every change and returns their lines (none:
        nothing to write), their keys and one undo for all. One ticket for all, so the batch
        is one write and one fsync, made durable or dropped whole."""
        self._check_writable()
        lines, keys, undo = apply()
        if lines:
            self._wait_durable(Ticket(keys, undo, self._next, b"\n".join(lines)))

    def _check_writable(self) -> None:
        if self._owner.forked():  # a fork no at-fork action reached (uWSGI's, a bare fork)
            self.detach()
        if self.broken:
            raise StoreUnavailable(self.broken, "broken")

    def _wait_durable(self, ticket: Ticket) -> None:
        self._pending.append(ticket)
        for key in ticket.keys:
            self._by_key[key] = ticket
        while ticket.durable is None:
            if self._syncing:
                ticket.batch.wait()
            else:
                self._sync()
        if not ticket.durable:
            raise StoreUnavailable(*self._failure)

    def wait_for(self, key: Hashable) -> None:
        """Wait until no swap holds appends back and no change of ``key`` is pending, so the
        caller decides on settled state and then appends without letting go of the lock."""
        while self._draining or key in self._by_key:
            if self._draining:
                self.cond.wait()
            else:
                ticket = self._by_key[key]
                while ticket.durable is None:
                    self._sync_or_wait()

    def wait_for_all(self, keys: Sequence[Hashable]) -> None:
        """``wait_for`` each of ``keys`` at once: returns, without having let go of the lock
        since it last checked, when none of them is pending."""
        while self._draining or any(key in self._by_key for key in keys):
            for key in keys:
                self.wait_for(key)

    def pending(self, key: Hashable) -> bool:
        return key in self._by_key

    def sync(self) -> bool:
        """Wait until every line appended so far has its fate; whether all are durable
        (tickets settle in order, and a rollback drops every pending one, so the newest
        ticket's fate is that of all before it)."""
        if not self._pending:
            return True
        last = self._pending[-1]
        while last.durable is None:
            self._sync_or_wait()
        return last.durable

    def swap(self, fd: int, tmp: str, since: int) -> tuple[int, int, bytes]:
        """Make ``fd`` (the file at ``tmp``, holding the state as of offset ``since`` of
        this file) the log: copy over what was appended since, fsync it, rename it over
        ``path`` and fsync the directory. Returns the old size, the new size, and the
        copied tail. ``fd`` and ``tmp`` are the log's from the call on: on a failure before
        the rename both are removed and the old file stays in use; after it, the log is
        broken (a power loss could bring back the old file)."""
        renamed = False
        try:
            self._settle()
            if self.broken:
                raise StoreUnavailable(self.broken, "broken")
            tail = os.pread(self.fd, self._size - since, since)
            self.write_all(fd, tail)
            self._sys._fsync_fd(fd)
            self._sys._replace(tmp, self.path)
            renamed = True
            before, size = self._size, os.fstat(fd).st_size
            os.close(self.fd)
            self.fd = fd
            self._size = self._durable_size = size
            self._identity = _identity(os.fstat(fd))
            fsync_dir(os.path.dirname(self.path), self._sys._fsync_fd)
        except OSError as exc:
            if renamed:
                self._break(f"cannot make the compacted {self.path} durable ({exc.strerror}); "
                            "restart the server to recover")
            raise StoreUnavailable(f"cannot compact {self.path}: {exc.strerror}") from None
        finally:
            if not renamed:
                os.close(fd)
                os.unlink(tmp)
        return before, size, tail

    def settled_size(self) -> int:
        """Hold appends back until everything appended is durable, then return the size."""
        self._settle()
        return self._size

    def _settle(self) -> None:
        self._draining = True
        try:
            while self._syncing or self._pending:
                self._sync_or_wait()
        finally:
            self._draining = False
            self.cond.notify_all()

    def _sync_or_wait(self) -> None:
        """Run one fsync covering every pending ticket, or wait for the one running."""
        if self._syncing:
            self.cond.wait()
        else:
            self._sync()

    def _sync(self) -> None:
        """Write every pending ticket's line and fsync them, as one group; then wake the
        writers it settled, one writer still pending (to run the next fsync), and those
        waiting on ``cond``."""
        self._syncing = True
        if self._fsync:
            # Let the threads that are ready run first (sched_yield lets go of the GIL; a
            # sleep(0) would wait out the kernel's timer slack): they append, find this sync
            # under way, wait for it, and its group covers them. Without this, on a busy
            # core they run only after the fsync and then share the next one: 16 threads
            # on one core made 8 creates a fsync, now 15.5.
            self.cond.release()
            try:
                os.sched_yield()
            finally:
                self.cond.acquire()
        covered = len(self._pending)
        data = b"".join([ticket.line + b"\n" for ticket in self._pending])
        batch, self._next = self._next, self._spare
        started = time.perf_counter()
        self.cond.release()
        try:
            failed = self._write_and_sync(data)
        finally:
            self.cond.acquire()
            self._syncing = False
            self.cond.notify_all()
            batch.notify_all()
            self._spare = batch  # its tickets are settled before cond's lock is let go
        if failed:
            cause, reason = failed
            if cause == "broken":
                self._break(f"{self.path} was {reason} under the running server; "
                            "restart the server to recover")
                reason = self.broken or reason
            self._failure = (f"cannot write {self.path}: {reason}", cause)
            self._failures.error(log, "cannot write %s: %s; rolling back %d changes",
                                 self.path, reason, len(self._pending))
            self._rollback()
        else:
            self._size = self._durable_size = self._size + len(data)
            for _ in range(covered):
                self._settle_ticket(self._pending.popleft(), True)
            self._on_sync(time.perf_counter() - started)
        if self._pending:
            self._next.notify()

    def _write_and_sync(self, data: bytes) -> tuple[str, str] | None:
        """Append ``data``, fsync, and check the path still names the file (without
        ``cond``); what failed as (cause, reason), or None."""
        try:
            self.write_all(self.fd, data)
        except OSError as exc:
            return "io", str(exc.strerror)
        try:
            if self._fsync:
                self._sys._fsync_fd(self.fd)
            if _identity(os.stat(self.path)) != self._identity:
                return "broken", "replaced"
        except FileNotFoundError:
            return "broken", "deleted"
        except OSError as exc:
            return "fsync", f"fsync failed ({exc.strerror})"
        return None

    def _rollback(self) -> None:
        """Drop every pending line, from the file and from memory."""
        while self._pending:
            ticket = self._pending.pop()
            ticket.undo()
            self._settle_ticket(ticket, False)
        self._cut_back(self._durable_size)
        self._next.notify_all()

    def _settle_ticket(self, ticket: Ticket, durable: bool) -> None:
        ticket.durable = durable
        for key in ticket.keys:
            if self._by_key.get(key) is ticket:
                del self._by_key[key]

    def _cut_back(self, size: int) -> None:
        """Cut the file back to ``size``, dropping what was written past it."""
        try:
            os.ftruncate(self.fd, size)
            if self._fsync:
                os.fsync(self.fd)
            self._size = size
        except OSError as exc:
            self._break(f"cannot truncate {self.path} after a failed write ({exc.strerror}); "
                        "restart the server to recover")

    def _break(self, message: str) -> None:
        if not self.broken:
            self.broken = message
            log.critical("%s", message)

    def write_all(self, fd: int, data: bytes) -> None:
        written = self._sys._write(fd, data)
        while written < len(data):
            written += self._sys._write(fd, data[written:])

    def detach(self) -> None:
        """In a forked child: close our copies of the file and of its lock (which leaves the
        parent's lock held, and lets it go when the parent ends) and refuse every change."""
        self.broken = (f"{self.path} was opened by process {self._owner.pid} before a fork; a "
                       "worker process must open its own store (see 'plant-store docs "
                       "processes')")
        self._close_descriptors()

    def close(self) -> None:
        with self.cond:
            while self._syncing:  # its fsync has the descriptor
                self.cond.wait()
            self._close_descriptors()
            self.broken = self.broken or f"{self.path} is closed"

    def _close_descriptors(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        if self._lock_fd >= 0:
            lock.release(self._lock_fd)
        self.fd = self._lock_fd = -1


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino
