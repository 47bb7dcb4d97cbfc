"""Compaction: the live state in a new file, renamed into place; a failure or a crash at
any step leaves the old file or the new one, whole, and the same plants and deliveries."""

import errno
import os

import pytest

from plant_store.stores import JsonFileStore, StoreUnavailable
from plant_store.stores.jsonfile.store import COMPACT_FILE, DATA_FILE
from plant_store.stores.records import Plant
from support.filled_stores import fill, state
from support.journals import records


def test_compaction_keeps_plants_order_cursors_and_outbox(tmp_path):
    path = tmp_path / DATA_FILE
    with JsonFileStore(str(tmp_path)) as store:
        fill(store)
        before = state(store)
        size = path.stat().st_size
        assert store.dead_share() > 0.3
        assert store.compact() == (size, path.stat().st_size)
        assert path.stat().st_size < size and store.dead_share() == 0
        assert state(store) == before
        store.create(Plant(100, "after"))  # appends go to the new file
        after = state(store)
    assert not (tmp_path / COMPACT_FILE).exists()
    with JsonFileStore(str(tmp_path)) as store:
        assert state(store) == after
        assert store.page(after[0][1][1] or 0, 100)[0][-1] == Plant(100, "after")


def test_changes_made_while_the_new_file_is_written_are_carried_over(tmp_path):
    class Busy(JsonFileStore):
        def _write(self, fd, data):
            if fd != self._fd and not self.meddled:  # the compacted file's first write
                self.meddled = True
                self.create(Plant(500, "during"))
                self.delete(1)
            return JsonFileStore._write(fd, data)

    with Busy(str(tmp_path)) as store:
        store.meddled = False
        fill(store)
        store.compact()
        assert store.meddled
        expected = state(store)
        assert store.get(500) == Plant(500, "during") and store.get(1) is None
    with JsonFileStore(str(tmp_path)) as store:
        assert state(store) == expected


class Failing(JsonFileStore):
    """Fails one named step of a compaction."""

    step = None

    def _write(self, fd, data):
        if self.step == "write" and fd != self._fd:
            raise OSError(errno.ENOSPC, "No space left on device")
        return JsonFileStore._write(fd, data)

    def _fsync_fd(self, fd):
        target = "fsync-dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync"
        if self.step == target and (target == "fsync-dir" or fd != self._fd):
            raise OSError(errno.EIO, "Input/output error")
        JsonFileStore._fsync_fd(fd)

    def _replace(self, src, dst):
        if self.step == "rename":
            raise OSError(errno.EROFS, "Read-only file system")
        os.replace(src, dst)


@pytest.mark.parametrize("step", ["write", "fsync", "rename"])
def test_a_failed_step_keeps_the_old_file_in_use(tmp_path, step):
    path = tmp_path / DATA_FILE
    with Failing(str(tmp_path)) as store:
        fill(store)
        expected, old = state(store), path.read_bytes()
        store.step = step
        with pytest.raises(StoreUnavailable, match="compact"):
            store.compact()
        assert path.read_bytes() == old and not (tmp_path / COMPACT_FILE).exists()
        store.step = None
        store.check()
        store.create(Plant(200, "still writable"))
        assert path.read_bytes().startswith(old)
        store.compact()  # and a later compaction succeeds
        expected = state(store)
    with JsonFileStore(str(tmp_path)) as store:
        assert state(store) == expected


def test_a_failed_directory_fsync_after_the_rename_stops_writes_until_restart(tmp_path):
    with Failing(str(tmp_path)) as store:
        fill(store)
        expected = state(store)
        store.step = "fsync-dir"
        with pytest.raises(StoreUnavailable):
            store.compact()
        store.step = None
        with pytest.raises(StoreUnavailable, match="restart"):
            store.check()
        with pytest.raises(StoreUnavailable):
            store.create(Plant(300, "refused"))
    with JsonFileStore(str(tmp_path)) as store:
        assert state(store) == expected


def test_compaction_starts_by_itself_past_the_dead_share(tmp_path, monkeypatch):
    monkeypatch.setattr(JsonFileStore, "MIN_COMPACT_RECORDS", 60)  # the last delete
    path = tmp_path / DATA_FILE
    with JsonFileStore(str(tmp_path), compact_share=0.5) as store:
        for plant_id in range(40):
            store.create(Plant(plant_id, "x"))
        for plant_id in range(20):
            store.delete(plant_id)  # 60 records, 20 live, 2/3 dead: past 0.5
        store._compactor.join(timeout=10)
        assert store.dead_share() == 0
        assert len(path.read_bytes().splitlines()) == 22  # a header, the epoch, 20 plants
        assert store.page(0, 100)[0] == [Plant(i, "x") for i in range(20, 40)]


def test_no_compaction_below_the_share_or_when_switched_off(tmp_path, monkeypatch):
    monkeypatch.setattr(JsonFileStore, "MIN_COMPACT_RECORDS", 10)
    for share, deletes in ((0.5, 6), (0, 19)):  # 12 of 26 records dead; 38 of 39
        data = tmp_path / str(share)
        with JsonFileStore(str(data), compact_share=share) as store:
            for plant_id in range(20):
                store.create(Plant(plant_id, "x"))
            for plant_id in range(deletes):
                store.delete(plant_id)
            assert store._compactor is None
            assert len(records(data / DATA_FILE)) == 20 + deletes


def test_a_failed_automatic_compaction_waits_before_trying_again(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(JsonFileStore, "MIN_COMPACT_RECORDS", 10)
    with Failing(str(tmp_path), compact_share=0.5) as store:
        store.step = "write"  # the disk is full for the compacted file
        for plant_id in range(10):
            store.create(Plant(plant_id, "x"))
        for plant_id in range(8):
            store.delete(plant_id)
            if store._compactor is not None:
                store._compactor.join()
        assert caplog.text.count("cannot compact") == 1  # one try, not one a delete
        assert "next try in 60 s" in caplog.text
        assert store.page(0, 10)[0] == [Plant(8, "x"), Plant(9, "x")]


