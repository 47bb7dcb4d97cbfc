"""The durable default: an append-only JSON Lines file with an in-memory index.

A change appends one line and returns only after an fsync covers it (group commit: one
fsync serves every line appended while the previous one ran). A failed write or fsync
truncates the file back to its last durable size and undoes the in-memory change, so
nothing unacknowledged survives half-written and nothing acknowledged is touched.

A plant's version (its ETag) is the epoch of its last write, its sequence number and its
revision (:func:`journal.version`). Each opening of the store draws a new random epoch and
writes it to the journal before the run's first create or update, so a write never has a
version an earlier one had, even after an older copy of the file is put back or an export
is imported into a fresh directory (where sequence numbers start again).

Deletes and settled webhook deliveries leave dead lines behind; compaction writes the live
state to a new file beside the old one, fsyncs it and renames it into place, so a crash at
any moment leaves either the old file or the new one, each whole.
"""

import contextlib
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence

from plant_store.events import Events
from plant_store.stores import lock
from plant_store.stores.base import (
    BatchConflict,
    Conflict,
    DataDirError,
    Store,
    StoreUnavailable,
    check_delete,
    needs_update,
    replay,
)
from plant_store.stores.jsonfile import journal
from plant_store.stores.jsonfile.appendlog import AppendLog
from plant_store.stores.outbox import deliveries_for
from plant_store.stores.records import Delivery, Plant, Preconditions, Versioned
from plant_store.util import at_fork, files

log = logging.getLogger("plant_store.stores.jsonfile")  # the name users filter on

DATA_FILE = "plants.jsonl"
COMPACT_FILE = DATA_FILE + ".compact"
LOCK_FILE = lock.LOCK_FILE
# A change's undo, named once: a nested function's annotations are evaluated each time its
# ``def`` runs, and ``Callable[[], None]`` built a new generic alias on every create (about
# 1 us; a name is one lookup).
Undo = Callable[[], None]
PAGE_TRIES = 3  # reads of a page whose writes were rolled back, before it gives up


class JsonFileStore(Store):
    """The durable default: plants in an append-only JSON Lines file, indexed in memory (the
    module's docstring)."""

    # The system calls of the write paths, as seams for fault-injection tests.
    _write = staticmethod(os.write)
    _fsync_fd = staticmethod(os.fsync)
    _replace = staticmethod(os.replace)
    # Automatic compaction waits for this many records, so small files are left alone, and
    # after a failed one (a full disk, say) waits this many seconds before the next try.
    MIN_COMPACT_RECORDS = 1000
    COMPACT_RETRY_DELAY = 60.0

    def __init__(self, data_dir: str, *, fsync: bool = True, compact_share: float = 0.5,
                 lock_timeout: float = 0.0, events: Events | None = None) -> None:
        """``events``: told each group commit's and compaction's time (the metrics)."""
        self.events = events if events is not None else Events()
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, DATA_FILE)
        self._compact_share = compact_share
        lock_fd = lock.hold(data_dir, lock_timeout)
        try:
            fd, state = self._open_journal(fsync)
        except BaseException:
            lock.release(lock_fd)
            raise
        self._log = AppendLog(self.path, fd, self, fsync=fsync, lock_fd=lock_fd,
                              on_sync=self.events.wrote)
        self._cond = self._log.cond
        self._index, self._order, self._outbox = state.index, state.order, state.outbox
        self._tags = state.tags
        self._records = state.records
        self._epoch = journal.new_epoch()  # of every create and update of this run
        self._epoch_record = journal.encode_epoch(self._epoch)
        self._stamped = False  # whether the file holds this run's epoch line yet
        self._compacting = threading.Lock()
        self._compactor: threading.Thread | None = None
        self._compact_after = 0.0  # monotonic time before which none starts by itself
        self.compactions = 0
        _open_stores.add(self)

    @property
    def _fd(self) -> int:
        return self._log.fd

    def _stamp(self, line: bytes) -> bytes:
        """``line`` (a create or an update), after this run's epoch line unless the file
        has it already. Under ``_cond``, with the change's ``apply`` calling
        :meth:`_stamped_now`, so the two are decided together."""
        return line if self._stamped else self._epoch_record + b"\n" + line

    def _stamped_now(self) -> Undo:
        """The file has this run's epoch line (once the write is durable); the undo puts
        back what was (a rolled-back write takes its epoch line with it)."""
        was, self._stamped = self._stamped, True

        def undo() -> None:
            self._stamped = was
        return undo

    def create(self, plant: Plant, webhooks: Sequence[str] = ()) -> tuple[Plant, bool]:
        owed = deliveries_for(plant, tuple(webhooks)) if webhooks else []
        line = journal.encode_create(plant, deliveries=owed)
        record = journal.encode_create(plant) if owed else line
        with self._cond:
            self._log.wait_for(plant.id)
            stored = self._index.get(plant.id)
            if stored is not None:
                return replay(journal.decode_plant(stored[1]), plant), False

            def apply() -> Undo:
                unstamp = self._stamped_now()
                seq = self._order.add(plant.id)
                self._index[plant.id] = (seq, record, 0, self._epoch)
                self._tags.add(plant.tag, seq, plant.id)
                for delivery in owed:
                    self._outbox.add(delivery)
                self._records += 1

                def undo() -> None:
                    unstamp()
                    del self._index[plant.id]
                    self._order.remove(seq)
                    self._tags.remove(plant.tag, seq)
                    for delivery in owed:
                        self._outbox.remove(delivery.id)
                    self._records -= 1
                return undo

            self._log.commit(self._stamp(line), plant.id, apply)
        return plant, True

    def update(self, plant: Plant,
               condition: Preconditions | None = None) -> tuple[Versioned, bool] | None:
        """The journal gets an update record; the index the plant's create record, as a
        compaction would write it, at the plant's own sequence number, one revision on, in
        this run's epoch."""
        line = journal.encode_update(plant)
        record = journal.encode_create(plant)
        with self._cond:
            self._log.wait_for(plant.id)
            stored = self._index.get(plant.id)
            if stored is None:
                return None
            seq, _, rev, epoch = stored
            before = journal.decode_plant(stored[1])
            held = journal.version(epoch, seq, rev)
            if not needs_update(Versioned(before, held), plant, condition):
                return Versioned(plant, held), False

            def apply() -> Undo:
                unstamp = self._stamped_now()
                self._index[plant.id] = (seq, record, rev + 1, self._epoch)
                self._tags.remove(before.tag, seq)
                self._tags.add(plant.tag, seq, plant.id)
                self._records += 1

                def undo() -> None:
                    unstamp()
                    self._index[plant.id] = stored
                    self._tags.remove(plant.tag, seq)
                    self._tags.add(before.tag, seq, plant.id)
                    self._records -= 1
                return undo

            self._log.commit(self._stamp(line), plant.id, apply)
        self._maybe_compact()
        return Versioned(plant, journal.version(self._epoch, seq, rev + 1)), True

    def create_many(self, plants: Sequence[Plant]) -> list[tuple[Plant, bool]]:
        """The plants' create records, one write and one fsync for all (``commit_many``):
        those created are in the index, the order and the tag index before the fsync, as a
        create's is, and every one is undone if the fsync fails. A repeated id is settled
        against its first create, in memory, as a later create would be."""
        records = [journal.encode_create(plant) for plant in plants]  # before the lock
        done: list[tuple[Plant, bool]] = []
        conflict: Conflict | None = None

        def apply() -> tuple[list[bytes], list[int], Callable[[], None]]:
            nonlocal conflict
            index, order, tags, made = self._index, self._order, self._tags, []
            epoch = self._epoch
            for plant, record in zip(plants, records, strict=True):
                stored = index.get(plant.id)
                if stored is None:
                    seq = order.add(plant.id)
                    index[plant.id] = (seq, record, 0, epoch)
                    tags.add(plant.tag, seq, plant.id)
                    made.append(plant)
                    done.append((plant, True))
                    continue
                try:
                    done.append((replay(journal.decode_plant(stored[1]), plant), False))
                except Conflict as exc:
                    conflict = exc
                    break
            self._records += len(made)
            lines = [index[plant.id][1] for plant in made]
            if lines and not self._stamped:
                lines.insert(0, self._epoch_record)
            unstamp = self._stamped_now() if lines else (lambda: None)

            def undo() -> None:
                unstamp()
                for plant in reversed(made):
                    seq = self._index.pop(plant.id)[0]
                    self._order.remove(seq)
                    self._tags.remove(plant.tag, seq)
                self._records -= len(made)
            return lines, [plant.id for plant in made], undo

        with self._cond:
            self._log.wait_for_all([plant.id for plant in plants])
            self._log.commit_many(apply)
        if conflict is not None:
            raise BatchConflict(conflict.stored, done)
        return done

    def delete(self, plant_id: int, condition: Preconditions | None = None) -> bool:
        line = journal.encode_delete(plant_id)
        with self._cond:
            self._log.wait_for(plant_id)
            stored = self._index.get(plant_id)
            if stored is None:
                return False
            before = journal.decode_plant(stored[1])
            check_delete(Versioned(before, journal.version(stored[3], stored[0], stored[2])),
                         condition)
            tag = before.tag

            def apply() -> Undo:
                del self._index[plant_id]
                self._order.remove(stored[0])
                self._tags.remove(tag, stored[0])
                self._records += 1

                def undo() -> None:
                    self._index[plant_id] = stored
                    self._order.add(plant_id, stored[0])
                    self._tags.add(tag, stored[0], plant_id)
                    self._records -= 1
                return undo

            self._log.commit(line, plant_id, apply)
        self._maybe_compact()
        return True

    def fetch(self, plant_id: int) -> Versioned | None:
        """Only a durable plant: a change of it still being written is waited for."""
        with self._cond:
            self._log.wait_for(plant_id)
            stored = self._index.get(plant_id)
        if stored is None:
            return None
        return Versioned(journal.decode_plant(stored[1]),
                         journal.version(stored[3], stored[0], stored[2]))

    def page(self, start: int, limit: int,
             tag: str | None = None) -> tuple[list[Plant], int | None]:
        """Only durable plants, as every read: the page is read, then answered once every
        line appended before the read is durable (the group commit running or the next
        one), so it shows no create, update or delete that could still be rolled back. A
        page that showed a write rolled back since is read again."""
        with self._cond:
            for _ in range(PAGE_TRIES):
                if self._log.broken:
                    raise StoreUnavailable(self._log.broken, "broken")
                entries = (self._order.page(start, limit) if tag is None
                           else self._tags.page(tag, start, limit))
                records = [self._index[plant_id][1] for _, plant_id in entries[:limit]]
                if self._log.sync():
                    after = entries[limit][0] if len(entries) > limit else None
                    return [journal.decode_plant(r) for r in records], after
        raise StoreUnavailable(f"cannot list {self.path}: its writes keep failing", "io")

    def __len__(self) -> int:
        return len(self._index)

    def deliveries(self, *, dead: bool = False) -> list[Delivery]:
        """Only deliveries of durable creates: a create whose fsync fails is not announced."""
        with self._cond:
            self._log.sync()
            return [d for d in self._outbox.list(dead=dead) if not self._log.pending(d.plant_id)]

    def settle(self, delivery_id: str, state: str, error: str | None = None,
               retry_in: float = 0.0) -> None:
        line = journal.encode_outcome(delivery_id, state, error)
        with self._cond:
            self._log.wait_for(delivery_id)
            if delivery_id not in self._outbox:
                raise KeyError(delivery_id)

            def apply() -> Undo:
                before = self._outbox.settle(delivery_id, state, error)
                self._records += 1

                def undo() -> None:
                    self._outbox.restore(before)
                    self._records -= 1
                return undo

            self._log.commit(line, delivery_id, apply)
        self._maybe_compact()

    def outbox_counts(self) -> tuple[int, int]:
        with self._cond:
            return self._outbox.counts()

    def lanes(self) -> list[str]:
        with self._cond:
            return self._outbox.urls()

    def lane(self, url: str, limit: int) -> list[Delivery]:
        """Only deliveries of durable creates, as :meth:`deliveries`; a pending one ends the
        lane (a later delivery must not go ahead of it; its create wakes the worker once it
        is acknowledged)."""
        with self._cond:
            owed = itertools.islice(self._outbox.queue(url), limit)
            return list(itertools.takewhile(lambda d: not self._log.pending(d.plant_id), owed))

    def check(self) -> None:
        """Ready: the file open, still the file at its path, on a file system not mounted
        read-only (the kernel's own remount after an I/O error: an operator's remount is
        refused while the file is open for writing). Its mode does not matter: the open
        descriptor writes whatever the mode says now."""
        if self._log.broken:
            raise StoreUnavailable(self._log.broken, "broken")
        try:
            same_file = os.path.samestat(os.fstat(self._log.fd), os.stat(self.path))
            read_only = os.statvfs(self.path).f_flag & os.ST_RDONLY
        except OSError as exc:
            raise StoreUnavailable(f"{self.path}: {exc.strerror}", "broken") from None
        if not same_file:
            raise StoreUnavailable(f"{self.path} was replaced under the running server",
                                   "broken")
        if read_only:
            raise StoreUnavailable(f"{self.path} is on a file system mounted read-only")

    def close(self) -> None:
        compactor = self._compactor
        if compactor is not None:
            compactor.join()
        self._log.close()

    def _forked(self) -> None:
        """In a child of fork(): the lock and the file stay the parent's, and the store
        refuses everything, so two processes never write one file. The locks are made anew:
        another thread of the parent may have held them at the fork."""
        self._log.detach()
        self._cond = self._log.renew_lock()
        self._compacting = threading.Lock()

    def dead_share(self) -> float:
        """The share of the file's records that a compaction would drop."""
        live = len(self._index) + len(self._outbox)
        return 1 - live / self._records if self._records else 0.0

    def compact(self) -> tuple[int, int]:
        """Rewrite the file with only its live records; return its size before and after.
        Writers wait while the live records are collected, and while what they appended
        meanwhile is copied over and the file swapped; not while the new file is written."""
        with self._compacting:
            started = time.perf_counter()
            with self._cond:
                start = self._log.settled_size()
                next_seq = self._order.next_seq
                plants = [(seq, *self._index[plant_id][1:]) for seq, plant_id in self._order]
                owed = list(self._outbox)
            lines = [journal.encode_header(next_seq)]
            epoch = journal.LEGACY  # what a file's lines are in before an epoch line
            for seq, record, rev, plant_epoch in plants:
                if plant_epoch != epoch:  # each plant keeps its last write's epoch
                    epoch = plant_epoch
                    lines.append(journal.encode_epoch(epoch))
                # A create record ends with "}": its seq (and rev) go in without a decode.
                lines.append(b"%s,\"seq\":%d,\"rev\":%d}" % (record[:-1], seq, rev) if rev
                             else b"%s,\"seq\":%d}" % (record[:-1], seq))
            if epoch != self._epoch:  # what is appended after it is in this run's epoch:
                lines.append(self._epoch_record)  # the tail copied over, later writes
            headers = len(lines) - len(plants)  # the compacted line and the epoch lines
            lines += [journal.encode_outbox(d) for d in owed]
            tmp = os.path.join(self.data_dir, COMPACT_FILE)
            try:
                fd = files.opener(tmp, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC)
            except OSError as exc:
                raise StoreUnavailable(f"cannot write {tmp}: {exc.strerror}") from None
            try:
                self._log.write_all(fd, b"\n".join(lines) + b"\n")
            except OSError as exc:
                os.close(fd)
                os.unlink(tmp)
                raise StoreUnavailable(f"cannot compact {self.path}: {exc.strerror}") from None
            with self._cond:
                before, size, tail = self._log.swap(fd, tmp, start)
                self._stamped = True  # its last epoch line is this run's
                self._records = (len(lines) - headers + tail.count(b"\n")
                                 - tail.count(b'{"op":"epoch",'))  # the header lines aside
            self.compactions += 1
        self.events.compacted(time.perf_counter() - started)
        log.info("compacted %s from %d to %d bytes", self.path, before, size)
        return before, size
    def _maybe_compact(self) -> None:
        """Compact in the background once dead records pass the configured share."""
        if (not self._compact_share or self._records < self.MIN_COMPACT_RECORDS
                or self.dead_share() <= self._compact_share or self._compacting.locked()
                or time.monotonic() < self._compact_after):
            return
        if self._compactor is None or not self._compactor.is_alive():
            self._compactor = threading.Thread(
                target=self._compact_in_background, name="plant-store-compact", daemon=True)
            self._compactor.start()

    def _compact_in_background(self) -> None:
        try:
            self.compact()
        except StoreUnavailable as exc:
            self._compact_after = time.monotonic() + self.COMPACT_RETRY_DELAY
            log.error("%s; the old file is kept and still used; next try in %g s or later",
                      exc, self.COMPACT_RETRY_DELAY)

    def _open_journal(self, fsync: bool) -> tuple[int, journal.Journal]:
        """Open (or create) the journal, cut a torn last line, read it back, and fsync it."""
        path = self.path
        try:
            with contextlib.suppress(FileNotFoundError):  # a compaction that died before
                os.unlink(os.path.join(self.data_dir, COMPACT_FILE))  # its rename: never live
            created = not os.path.lexists(path)
            fd = files.opener(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        except OSError as exc:
            raise DataDirError(f"cannot open {path}: {exc.strerror}") from None
        try:
            if created:  # make the new directory entry durable too
                files.fsync_dir(self.data_dir, self._fsync_fd)
            with open(fd, "rb", closefd=False) as fh:
                state = journal.read(path, fh.read())
            if state.torn:
                log.warning("%s: dropped %d bytes of a torn last record", path, state.torn)
                os.ftruncate(fd, state.size)
            # Lines a killed server wrote but never fsynced may be read back (from the page
            # cache): made durable before any is served or becomes an If-Match base.
            if fsync:
                self._fsync_fd(fd)
        except OSError as exc:
            os.close(fd)
            raise DataDirError(f"cannot read {path}: {exc.strerror}") from None
        except BaseException:
            os.close(fd)
            raise
        return fd, state


_open_stores: "weakref.WeakSet[JsonFileStore]" = weakref.WeakSet()


@at_fork.register
def _forked_all() -> None:
    for store in list(_open_stores):
        store._forked()
