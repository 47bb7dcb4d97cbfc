"""The real-server half of tests/unit/stores/jsonfile/test_compaction.py: compaction: the live
state in a new file, renamed into place; a failure or a crash at any step leaves the old
file or the new one, whole, and the same plants and deliveries."""

import os
import threading

from plant_store.stores import JsonFileStore
from plant_store.stores.jsonfile.store import COMPACT_FILE, DATA_FILE
from plant_store.stores.records import Plant
from support.filled_stores import fill, state
from support.servers import Server, run_cli


def crash_at(tmp_path, n):
    """In a child process: fill a store, compact it, and die at the n-th system call of
    the compaction (write, fsync or rename). Returns False once n is past the last one."""
    pid = os.fork()
    if pid == 0:
        try:
            class Crashing(JsonFileStore):
                calls = None

                def _count(self):
                    if self.calls is not None:
                        self.calls += 1
                        if self.calls == n:
                            os._exit(9)  # as sudden as kill -9: no cleanup, no flush

                def _write(self, fd, data):
                    self._count()
                    return JsonFileStore._write(fd, data)

                def _fsync_fd(self, fd):
                    self._count()
                    JsonFileStore._fsync_fd(fd)

                def _replace(self, src, dst):
                    self._count()
                    os.replace(src, dst)

            store = Crashing(str(tmp_path))
            fill(store)
            store.calls = 0
            store.compact()
            os._exit(0)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) in (0, 9)
    return os.WEXITSTATUS(status) == 9


def test_a_crash_at_any_step_leaves_a_whole_file_with_the_same_state(tmp_path):
    reference = tmp_path / "reference"
    with JsonFileStore(str(reference)) as store:
        fill(store)
        expected = state(store)
        deliveries = [(d.id, d.attempts, d.dead) for d in expected[1] + expected[2]]
    n = 1
    while True:
        data = tmp_path / f"crash-{n}"
        crashed = crash_at(data, n)
        with JsonFileStore(str(data)) as store:  # no warning of a torn line, no corruption
            got = state(store)
            assert (got[0], got[3]) == (expected[0], expected[3]), f"crash at call {n}"
            assert [(d.attempts, d.dead) for d in got[1] + got[2]] == [
                (attempts, dead) for _, attempts, dead in deliveries]
        assert not (data / COMPACT_FILE).exists()
        if not crashed:
            break
        n += 1
    assert n >= 5  # write, write of the tail, fsync, rename, fsync of the directory


def test_compact_command_and_a_compaction_racing_writers(tmp_path):
    with JsonFileStore(str(tmp_path)) as store:
        fill(store)
        stop = threading.Event()

        def write():
            n = 1000
            while not stop.is_set():
                store.create(Plant(n, "racer"))
                store.delete(n - 1) if n % 2 else None
                n += 1

        writer = threading.Thread(target=write)
        writer.start()
        for _ in range(5):
            store.compact()
        stop.set()
        writer.join()
        expected = state(store)
    size = (tmp_path / DATA_FILE).stat().st_size
    result = run_cli("compact", "--data-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert f"from {size} to" in result.stdout
    with JsonFileStore(str(tmp_path)) as store:
        assert state(store) == expected


def test_compact_command_refuses_a_directory_a_server_holds(tmp_path):
    with Server(tmp_path):
        result = run_cli("compact", "--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert "in use by another plant-store process" in result.stderr
    assert "a running server compacts by itself" in result.stderr
