"""The durable default: an append-only JSON Lines file with an in-memory index.

A create appends one line and returns only after an fsync covers it (group commit: one
fsync serves every line appended while the previous one ran). A failed write or fsync
truncates the file back to its last durable size and undoes the index, so nothing
unacknowledged survives half-written and nothing acknowledged is touched.
"""

import logging
import os
import threading

from plant_store.stores import journal, lock
from plant_store.stores.base import Plant, Store, StoreError, StoreUnavailable, replay

log = logging.getLogger(__name__)

DATA_FILE = "plants.jsonl"
LOCK_FILE = "plants.lock"


class JsonFileStore(Store):
    # The two system calls of the write path, as seams for fault-injection tests.
    _write = staticmethod(os.write)
    _fsync_fd = staticmethod(os.fsync)

    def __init__(self, data_dir: str, *, fsync: bool = True) -> None:
        self.path = os.path.join(data_dir, DATA_FILE)
        self._fsync = fsync
        try:
            os.makedirs(data_dir, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create data directory {data_dir}: {exc.strerror}") from None
        self._lock_fd = lock.acquire(os.path.join(data_dir, LOCK_FILE))
        try:
            self._fd, self._index, self._durable = self._open_journal(data_dir)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._end = self._durable  # bytes appended, durable or not
        self._order = list(self._index)  # ids in creation order: a page is one slice of it
        self._cond = threading.Condition(threading.Lock())
        self._syncing = False
        self._epoch = 0  # bumped by each rollback, so waiters know their line is gone
        self._unsynced: dict[int, tuple[int, bytes | None]] = {}  # id -> (end, previous)
        self._broken: str | None = None

    def create(self, plant: Plant) -> tuple[Plant, bool]:
        line = journal.encode_create(plant)
        with self._cond:
            while True:
                stored = self._index.get(plant.id)
                if stored is None:
                    break
                pending = self._unsynced.get(plant.id)
                if pending is None:
                    return replay(journal.decode_plant(stored), plant), False
                # Another request's line for this id is not durable yet: wait and look again.
                self._sync_through(pending[0], self._epoch)
            self._append(line + b"\n", plant.id, None, line)
            if not self._sync_through(self._end, self._epoch):
                reason = self._broken or "fsync failed"
                raise StoreUnavailable(f"cannot write {self.path}: {reason}")
        return plant, True

    def get(self, plant_id: int) -> Plant | None:
        stored = self._index.get(plant_id)
        return None if stored is None else journal.decode_plant(stored)

    def page(self, start: int, limit: int) -> tuple[list[Plant], int | None]:
        """Only durable plants are listed: a page stops where unsynced creates begin."""
        with self._cond:
            listable = len(self._order) - sum(
                1 for _, previous in self._unsynced.values() if previous is None)
            records = [self._index[plant_id]
                       for plant_id in self._order[start:min(start + limit, listable)]]
        after = start + len(records)
        return [journal.decode_plant(r) for r in records], after if after < listable else None

    def __len__(self) -> int:
        return len(self._index)

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
        with self._cond:
            if self._fd < 0:
                return
            os.close(self._fd)
            os.close(self._lock_fd)
            self._fd = self._lock_fd = -1

    def _open_journal(self, data_dir: str) -> tuple[int, dict[int, bytes], int]:
        """Open (or create) the journal, cut a torn last line, and read it into an index."""
        path = self.path
        try:
            created = not os.path.exists(path)
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot open {path}: {exc.strerror}") from None
        try:
            if created:  # make the new directory entry durable too
                dir_fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    self._fsync_fd(dir_fd)
                finally:
                    os.close(dir_fd)
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
        return fd, state.index, state.size

    # Called with self._cond held.

    def _append(self, data: bytes, plant_id: int, previous: bytes | None, record: bytes) -> None:
        if self._broken:
            raise StoreUnavailable(self._broken)
        try:
            written = self._write(self._fd, data)
            while written < len(data):
                written += self._write(self._fd, data[written:])
        except OSError as exc:
            self._truncate(self._end)
            raise StoreUnavailable(f"cannot write {self.path}: {exc.strerror}") from None
        self._end += len(data)
        self._unsynced[plant_id] = (self._end, previous)
        self._index[plant_id] = record
        if previous is None:
            self._order.append(plant_id)

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
        for plant_id, (end, _) in list(self._unsynced.items()):
            if end > target:
                break
            del self._unsynced[plant_id]

    def _rollback(self) -> None:
        """Drop every line after the last durable byte, from the file and the index."""
        for plant_id, (_, previous) in reversed(self._unsynced.items()):
            if previous is None:
                del self._index[plant_id]
                self._order.pop()  # unsynced creates are the order's tail, newest last
            else:
                self._index[plant_id] = previous
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
