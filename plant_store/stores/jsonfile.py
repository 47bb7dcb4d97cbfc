"""The durable default: an append-only JSON Lines file with an in-memory index.

A change appends one line and returns only after an fsync covers it (group commit: one
fsync serves every line appended while the previous one ran). A failed write or fsync
truncates the file back to its last durable size and undoes the in-memory change, so
nothing unacknowledged survives half-written and nothing acknowledged is touched.

Deletes and settled webhook deliveries leave dead lines behind; compaction writes the live
state to a new file beside the old one, fsyncs it and renames it into place, so a crash at
any moment leaves either the old file or the new one, each whole.
"""

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence

from plant_store.stores import journal, lock
from plant_store.stores.base import Plant, Store, StoreError, StoreUnavailable, replay
from plant_store.stores.outbox import Delivery, deliveries_for

log = logging.getLogger(__name__)

DATA_FILE = "plants.jsonl"
COMPACT_FILE = DATA_FILE + ".compact"
LOCK_FILE = "plants.lock"


class JsonFileStore(Store):
    # The system calls of the write paths, as seams for fault-injection tests.
    _write = staticmethod(os.write)
    _fsync_fd = staticmethod(os.fsync)
    _replace = staticmethod(os.replace)
    # Automatic compaction waits for this many records, so small files are left alone, and
    # after a failed one (a full disk, say) waits this many seconds before the next try.
    MIN_COMPACT_RECORDS = 1000
    COMPACT_RETRY_DELAY = 60.0

    def __init__(self, data_dir: str, *, fsync: bool = True, compact_share: float = 0.5,
                 lock_timeout: float = 0.0) -> None:
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, DATA_FILE)
        self._fsync = fsync
        self._compact_share = compact_share
        try:
            os.makedirs(data_dir, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create data directory {data_dir}: {exc.strerror}") from None
        self._lock_fd = lock.acquire(os.path.join(data_dir, LOCK_FILE), lock_timeout)
        try:
            self._fd, state = self._open_journal()
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._index, self._order, self._outbox = state.index, state.order, state.outbox
        self._durable = self._end = state.size  # bytes durable; bytes appended
        self._records = state.records
        self._cond = threading.Condition(threading.Lock())
        self._syncing = False
        self._draining = False  # a compaction waits for a settled file: appends wait
        self._epoch = 0  # bumped by each rollback, so waiters know their line is gone
        # Appended but not yet durable, by plant or delivery id: (end, undo), oldest first.
        self._unsynced: dict[int | str, tuple[int, Callable[[], None]]] = {}
        self._broken: str | None = None
        self._compacting = threading.Lock()
        self._compactor: threading.Thread | None = None
        self._compact_after = 0.0  # monotonic time before which none starts by itself

    def create(self, plant: Plant, webhooks: Sequence[str] = ()) -> tuple[Plant, bool]:
        owed = deliveries_for(plant, tuple(webhooks)) if webhooks else []
        line = journal.encode_create(plant, deliveries=owed)
        record = journal.encode_create(plant) if owed else line
        with self._cond:
            self._wait_for(plant.id)
            stored = self._index.get(plant.id)
            if stored is not None:
                return replay(journal.decode_plant(stored[1]), plant), False

            def apply():
                seq = self._order.add(plant.id)
                self._index[plant.id] = (seq, record)
                for delivery in owed:
                    self._outbox.add(delivery)

                def undo():
                    del self._index[plant.id]
                    self._order.remove(seq)
                    for delivery in owed:
                        self._outbox.remove(delivery.id)
                return undo

            self._commit(line, plant.id, apply)
        return plant, True

    def delete(self, plant_id: int) -> bool:
        line = journal.encode_delete(plant_id)
        with self._cond:
            self._wait_for(plant_id)
            stored = self._index.get(plant_id)
            if stored is None:
                return False

            def apply():
                del self._index[plant_id]
                self._order.remove(stored[0])

                def undo():
                    self._index[plant_id] = stored
                    self._order.add(plant_id, stored[0])
                return undo

            self._commit(line, plant_id, apply)
        self._maybe_compact()
        return True

    def get(self, plant_id: int) -> Plant | None:
        stored = self._index.get(plant_id)
        return None if stored is None else journal.decode_plant(stored[1])

    def page(self, start: int, limit: int) -> tuple[list[Plant], int | None]:
        """Only durable plants are listed: a page stops where unsynced creates begin."""
        with self._cond:
            entries = self._order.page(start, limit)
            for n, (_, plant_id) in enumerate(entries):
                if plant_id in self._unsynced:  # in the order, so an unsynced create
                    del entries[n:]
                    break
            records = [self._index[plant_id][1] for _, plant_id in entries[:limit]]
        after = entries[limit][0] if len(entries) > limit else None
        return [journal.decode_plant(r) for r in records], after

    def __len__(self) -> int:
        return len(self._index)

    def deliveries(self, *, dead: bool = False) -> list[Delivery]:
        """Only deliveries of durable creates: a create whose fsync fails is not announced."""
        with self._cond:
            self._sync_through(self._end, self._epoch)
            return [d for d in self._outbox.list(dead=dead) if d.plant_id not in self._unsynced]

    def settle(self, delivery_id: str, state: str, error: str | None = None) -> None:
        line = journal.encode_outcome(delivery_id, state, error)
        with self._cond:
            self._wait_for(delivery_id)
            if delivery_id not in self._outbox:
                raise KeyError(delivery_id)

            def apply():
                before = self._outbox.settle(delivery_id, state, error)
                return lambda: self._outbox.restore(before)

            self._commit(line, delivery_id, apply)
        self._maybe_compact()

    def check(self) -> None:
        if self._broken:
            raise StoreUnavailable(self._broken)
        try:
            same_file = os.path.samestat(os.fstat(self._fd), os.stat(self.path))
        except OSError as exc:
            raise StoreUnavailable(f"{self.path}: {exc.strerror}") from None
        if not same_file:
            raise StoreUnavailable(f"{self.path} was replaced under the running server")

    def close(self) -> None:
        compactor = self._compactor
        if compactor is not None:
            compactor.join()
        with self._cond:
            if self._fd < 0:
                return
            os.close(self._fd)
            os.close(self._lock_fd)
            self._fd = self._lock_fd = -1

    def dead_share(self) -> float:
        """The share of the file's records that a compaction would drop."""
        live = len(self._index) + len(self._outbox)
        return 1 - live / self._records if self._records else 0.0

    def compact(self) -> tuple[int, int]:
        """Rewrite the file with only its live records; return its size before and after.
        Writers wait while the live records are collected, and while what they appended
        meanwhile is copied over and the file swapped; not while the new file is written."""
        with self._compacting:
            with self._cond:
                self._settle()
                start = self._end
                next_seq = self._order.next_seq
                plants = [(seq, self._index[plant_id][1]) for seq, plant_id in self._order]
                owed = list(self._outbox)
            lines = [journal.encode_header(next_seq)]
            # A create record ends with "}": its seq goes in without a decode.
            lines += [b"%s,\"seq\":%d}" % (record[:-1], seq) for seq, record in plants]
            lines += [journal.encode_outbox(d) for d in owed]
            tmp = os.path.join(self.data_dir, COMPACT_FILE)
            flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
            try:
                fd = os.open(tmp, flags, 0o644)
            except OSError as exc:
                raise StoreUnavailable(f"cannot write {tmp}: {exc.strerror}") from None
            renamed = False
            try:
                self._write_all(fd, b"\n".join(lines) + b"\n")
                with self._cond:
                    self._settle()
                    if self._fd < 0:
                        raise StoreUnavailable(f"{self.path} was closed during compaction")
                    tail = os.pread(self._fd, self._end - start, start)
                    self._write_all(fd, tail)
                    self._fsync_fd(fd)
                    self._replace(tmp, self.path)
                    renamed = True
                    before, size = self._end, os.fstat(fd).st_size
                    os.close(self._fd)
                    self._fd, fd = fd, -1  # the new file is the journal now
                    self._durable = self._end = size
                    self._records = len(lines) - 1 + tail.count(b"\n")  # the header aside
                    self._fsync_dir()
            except OSError as exc:
                if not renamed:
                    os.unlink(tmp)
                else:  # in place, but a power loss could bring back the old file
                    self._broken = (f"cannot make the compacted {self.path} durable "
                                    f"({exc.strerror}); restart the server to recover")
                    log.critical("%s", self._broken)
                raise StoreUnavailable(f"cannot compact {self.path}: {exc.strerror}") from None
            finally:
                if fd >= 0:
                    os.close(fd)
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

    def _open_journal(self) -> tuple[int, journal.Journal]:
        """Open (or create) the journal, cut a torn last line, and read it back."""
        path = self.path
        try:
            stale = os.path.join(self.data_dir, COMPACT_FILE)
            if os.path.exists(stale):  # a compaction died before its rename: never live
                os.unlink(stale)
            created = not os.path.exists(path)
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot open {path}: {exc.strerror}") from None
        try:
            if created:  # make the new directory entry durable too
                self._fsync_dir()
            with open(fd, "rb", closefd=False) as fh:
                state = journal.read(path, fh.read())
            if state.torn:
                log.warning("%s: dropped %d bytes of a torn last record", path, state.torn)
                os.ftruncate(fd, state.size)
                self._fsync_fd(fd)
        except OSError as exc:
            os.close(fd)
            raise StoreError(f"cannot read {path}: {exc.strerror}") from None
        except BaseException:
            os.close(fd)
            raise
        return fd, state

    def _fsync_dir(self) -> None:
        dir_fd = os.open(self.data_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self._fsync_fd(dir_fd)
        finally:
            os.close(dir_fd)

    def _write_all(self, fd: int, data: bytes) -> None:
        written = self._write(fd, data)
        while written < len(data):
            written += self._write(fd, data[written:])

    # Called with self._cond held.

    def _wait_for(self, key: int | str) -> None:
        """Wait until no compaction holds appends back and no other change of ``key`` is
        waiting for its fsync; the caller then appends without letting go of the lock."""
        while self._draining or key in self._unsynced:
            if self._draining:
                self._cond.wait()
            else:
                self._sync_through(self._unsynced[key][0], self._epoch)

    def _settle(self) -> None:
        """Hold new appends back until everything appended is durable and no fsync runs;
        without that, a steady stream of writers could keep the compaction waiting."""
        self._draining = True
        try:
            while self._syncing or self._durable < self._end:
                if self._syncing:
                    self._cond.wait()
                else:
                    self._sync_through(self._end, self._epoch)
        finally:
            self._draining = False
            self._cond.notify_all()

    def _commit(self, line: bytes, key: int | str, apply: Callable[[], Callable[[], None]]) -> None:
        """Append ``line``, ``apply`` its change, and wait until the line is durable; the
        change is undone (by what ``apply`` returned) if the write or the fsync fails."""
        if self._broken:
            raise StoreUnavailable(self._broken)
        try:
            self._write_all(self._fd, line + b"\n")
        except OSError as exc:
            self._truncate(self._end)
            raise StoreUnavailable(f"cannot write {self.path}: {exc.strerror}") from None
        self._end += len(line) + 1
        self._records += 1
        self._unsynced[key] = (self._end, apply())
        if not self._sync_through(self._end, self._epoch):
            reason = self._broken or "fsync failed"
            raise StoreUnavailable(f"cannot write {self.path}: {reason}")

    def _sync_through(self, end: int, epoch: int) -> bool:
        """Wait until byte ``end`` is durable; False if a rollback removed it first."""
        while self._durable < end:
            if self._epoch != epoch:
                return False
            if self._syncing:
                self._cond.wait()
                continue
            self._syncing = True
            target = self._end
            self._cond.release()
            try:
                if self._fsync:
                    self._fsync_fd(self._fd)
                error = None
            except OSError as exc:
                error = exc
            finally:
                self._cond.acquire()
                self._syncing = False
                self._cond.notify_all()
            if error is None:
                self._durable = target
                self._forget_synced(target)
            else:
                log.error("fsync of %s failed: %s; rolling back", self.path, error.strerror)
                self._rollback()
        return True

    def _forget_synced(self, target: int) -> None:
        for key, (end, _) in list(self._unsynced.items()):
            if end > target:
                break
            del self._unsynced[key]

    def _rollback(self) -> None:
        """Drop every line after the last durable byte, from the file and from memory."""
        for _, undo in reversed(self._unsynced.values()):
            undo()
        self._records -= len(self._unsynced)
        self._unsynced.clear()
        self._epoch += 1
        self._truncate(self._durable)
        self._end = self._durable

    def _truncate(self, size: int) -> None:
        try:
            os.ftruncate(self._fd, size)
            if self._fsync:
                os.fsync(self._fd)
        except OSError as exc:
            self._broken = (
                f"cannot truncate {self.path} after a failed write ({exc.strerror}); "
                "restart the server to recover"
            )
            log.critical("%s", self._broken)


def inspect(data_dir: str) -> journal.Journal:
    """Read the journal of ``data_dir`` without locking or changing it."""
    path = os.path.join(data_dir, DATA_FILE)
    try:
        with open(path, "rb") as fh:
            return journal.read(path, fh.read())
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror}") from None
