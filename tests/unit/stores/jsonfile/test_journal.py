"""Reading the JSON-file store back: torn tails are cut, corruption refuses to start."""

import os
import stat

from plant_store.stores import JsonFileStore
from plant_store.stores.records import Plant
from support.journals import records


class RecordingStore(JsonFileStore):
    """Records, for each fsync, whether it was of a directory."""

    def __init__(self, data_dir):
        self.synced = []
        super().__init__(data_dir)

    def _fsync_fd(self, fd):
        self.synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        JsonFileStore._fsync_fd(fd)


def test_new_journal_is_created_and_its_directory_entry_synced(tmp_path):
    data_dir = tmp_path / "new" / "dir"
    with RecordingStore(str(data_dir)) as store:
        assert store.synced == [True, False]  # the directory, for the new file; the file
        store.create(Plant(1, "x"))
        assert store.synced == [True, False, False]  # then the file, for the create
    assert records(data_dir) == [b'{"op":"create","id":1,"name":"x"}']
    with RecordingStore(str(data_dir)) as store:
        # An existing file needs no directory sync, but is fsynced before anything in it is
        # served: a killed server's lines may be in the page cache only (the hostile round 5).
        assert store.synced == [False]
