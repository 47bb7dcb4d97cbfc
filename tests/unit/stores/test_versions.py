"""Versions (what ETags name) across the documented restore paths, on the stores in process
(PostgreSQL's pg_dump and restore: tests/postgres/test_postgres_restore.py).

A version names one write of one id and is never issued again for it: not after an export
imported into a fresh store (issue 49, finding 6: the JSON file's first plant was "0.0"
again, and a client's stale ``If-Match: "0.0"`` overwrote a newer write), not after an
older copy of the data directory is put back, not after a compaction and a restart. A
restore brings back the plants as they were, each with the version it had then (same
data, same version); every write after it has a version no earlier write had.
"""

import io
import itertools
import pathlib
import shutil
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plant_store.cli import plants as transfer
from plant_store.stores import JsonFileStore, MemoryStore, PreconditionFailed
from plant_store.stores.jsonfile.store import DATA_FILE
from plant_store.stores.records import Plant, Preconditions
from support.suites.plant_store_contract import REQUEST, History


def if_match(*versions):
    return Preconditions(if_match=frozenset(versions))


def moved(source, destination):
    """Export ``source`` and import it into ``destination``, as the commands do."""
    out = io.BytesIO()
    transfer.export(source, out)
    transfer.import_lines(destination, io.BytesIO(out.getvalue()), 65536)


@pytest.mark.parametrize("kinds", [("jsonfile", "jsonfile"), ("memory", "jsonfile"),
                                   ("jsonfile", "memory")])
def test_an_etag_from_before_an_export_and_import_never_matches_after_it(tmp_path, kinds):
    """Finding 6: export, import into a fresh data directory, and a client's ETag from the
    old store names no write of the new one: its conditional PUT is 412, and the next
    update's version is one no client holds."""
    def opened(kind, where):
        where.mkdir()
        return MemoryStore() if kind == "memory" else JsonFileStore(str(where))

    issued = []
    with opened(kinds[0], tmp_path / "old") as old:
        old.create(Plant(1, "Fern"))
        issued.append(old.fetch(1).version)
        old.create(Plant(2, "Aloe"))
        issued.append(old.fetch(2).version)
        issued.append(old.update(Plant(2, "Aloe vera"))[0].version)
        with opened(kinds[1], tmp_path / "new") as new:
            moved(old, new)
            for plant_id in (1, 2):
                assert new.fetch(plant_id).version not in issued
            with pytest.raises(PreconditionFailed):
                new.update(Plant(1, "Fern, stale"), if_match(issued[0]))
            with pytest.raises(PreconditionFailed):
                new.update(Plant(2, "Aloe, stale"), if_match(*issued))
            with pytest.raises(PreconditionFailed):
                new.delete(1, if_match(*issued))
            done, wrote = new.update(Plant(1, "Fern, new"))
            assert wrote and done.version not in issued
            assert new.get(2) == Plant(2, "Aloe vera")


def test_an_etag_issued_after_a_backup_never_matches_after_that_backup_is_restored(tmp_path):
    """A file copy of the data directory put back: the plants as they were, with the
    versions they had then; the next write of a plant has a version never issued before,
    so a client holding one issued after the backup gets 412."""
    data, backup = tmp_path / "data", tmp_path / "backup"
    data.mkdir()
    issued = []
    with JsonFileStore(str(data)) as store:
        store.create(Plant(1, "Fern"))
        issued.append(store.fetch(1).version)
        issued.append(store.update(Plant(1, "Fern 2"))[0].version)
        at_backup = issued[-1]
        backup.mkdir()
        shutil.copy2(data / DATA_FILE, backup / DATA_FILE)  # the copy, while it runs
        issued.append(store.update(Plant(1, "Fern 3"))[0].version)
    shutil.copy2(backup / DATA_FILE, data / DATA_FILE)  # stopped: the copy put back
    with JsonFileStore(str(data)) as store:
        assert store.fetch(1) == (Plant(1, "Fern 2"), at_backup)  # same data, same version
        with pytest.raises(PreconditionFailed):  # issued after the backup: gone with it
            store.update(Plant(1, "Fern, stale"), if_match(issued[-1]))
        done, wrote = store.update(Plant(1, "Fern 4"), if_match(at_backup))
        assert wrote and done.version not in issued, "a version came back after a restore"
        issued.append(done.version)
    shutil.copy2(backup / DATA_FILE, data / DATA_FILE)  # the same backup again
    with JsonFileStore(str(data)) as store:
        store.compact()
        done, wrote = store.update(Plant(1, "Fern 5"))
        assert wrote and done.version not in issued, "a version came back after a restore"
        with pytest.raises(PreconditionFailed):
            store.update(Plant(1, "Fern, stale"), if_match(*issued))


def test_a_compaction_and_a_restart_keep_every_version(tmp_path):
    """Issue 49, finding 9: a compaction that dropped a plant's revision (every updated
    plant back to its create's version after a restart, so a stale If-Match matched again)
    was caught by no test. Versions are the same after a compaction and a restart, plants
    untouched since included; a stale one still refuses."""
    with JsonFileStore(str(tmp_path)) as store:
        for plant_id in range(4):
            store.create(Plant(plant_id, f"p{plant_id}"))
        created = {plant_id: store.fetch(plant_id).version for plant_id in range(4)}
        for plant_id in (1, 2):
            store.update(Plant(plant_id, "once"))
        store.update(Plant(2, "twice"))
        before = {plant_id: store.fetch(plant_id).version for plant_id in range(4)}
        assert before[1] != created[1] and before[2] != created[2]
        store.compact()
        assert {plant_id: store.fetch(plant_id).version for plant_id in range(4)} == before
    with JsonFileStore(str(tmp_path)) as store:
        assert {plant_id: store.fetch(plant_id).version for plant_id in range(4)} == before
        for plant_id in (1, 2):
            with pytest.raises(PreconditionFailed):
                store.update(Plant(plant_id, "stale"), if_match(created[plant_id]))
        done, wrote = store.update(Plant(3, "new"), if_match(before[3]))
        assert wrote and done.version not in created.values()


class Lifecycle:
    """A JSON-file store whose history goes back and starts again, as an operator's does:
    restarts, compactions, file copies taken and put back, moves by export and import."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root, self.dirs = root, itertools.count()
        self.store = self._open(self._new_dir())
        self.backups: list[tuple[bytes, dict]] = []

    def _new_dir(self) -> pathlib.Path:
        where = self.root / str(next(self.dirs))
        where.mkdir()
        return where

    @staticmethod
    def _open(where) -> JsonFileStore:
        return JsonFileStore(str(where), fsync=False, compact_share=0)

    def run(self, history: History, kind: str, pick: int) -> None:
        store, where = self.store, pathlib.Path(self.store.data_dir)
        if kind == "backup":  # a file copy, while it runs: the model as it is
            self.backups.append((pathlib.Path(store.path).read_bytes(), dict(history.model)))
            return
        if kind == "restore" and not self.backups:
            return
        if kind == "compact":
            store.compact()
        if kind == "move":
            out = io.BytesIO()
            transfer.export(store, out)
        store.close()
        if kind == "restore":  # stopped, the copy put back, started: the model as it was
            data, model = self.backups[pick % len(self.backups)]
            (where / DATA_FILE).write_bytes(data)
            history.model = dict(model)
        if kind == "move":  # into a fresh data directory: new versions, none seen before
            where = self._new_dir()
            self.store = history.store = self._open(where)
            transfer.import_lines(self.store, io.BytesIO(out.getvalue()), 65536)
            for plant_id, held in history.model.items():
                if held is not None:
                    history.new_version(plant_id, held[0], self.store.fetch(plant_id).version)
        else:
            self.store = history.store = self._open(where)
        history.check()


_lifecycle = st.sampled_from(["restart", "compact", "backup", "backup", "restore", "move"])
_step = st.one_of(REQUEST, REQUEST, REQUEST, st.tuples(_lifecycle, st.integers(0, 50)))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(steps=st.lists(_step, min_size=20, max_size=40))
def test_no_history_with_restarts_restores_and_moves_brings_a_version_back(steps):
    """The store contract's history property (tests/support/suites/plant_store_contract.py)
    on the JSON file, its requests mixed with restarts, a compaction and a restart, file
    copies of the data directory taken and later put back (stopped, then started), and
    moves by export and import into a fresh data directory. After a restore the plants are
    as the copy had them, each with the version it had; every write after it has a version
    no write ever had, so a request conditional on any other version a client saw is 412."""
    with tempfile.TemporaryDirectory() as root:
        life = Lifecycle(pathlib.Path(root))
        history = History(life.store)
        try:
            for step in steps:
                if len(step) == 2:
                    life.run(history, *step)
                else:
                    history.step(*step)
        finally:
            life.store.close()
