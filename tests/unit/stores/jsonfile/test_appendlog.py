"""The append log's invariants, tested directly with many threads: a waiter holds a ticket,
never an offset, so swaps and rollbacks cannot strand it; a failed fsync drops exactly the
pending lines; a file deleted or replaced under the log acknowledges nothing more."""

import errno
import logging
import os
import signal
import threading
import time

import pytest

from plant_store.stores import JsonFileStore, StoreUnavailable
from plant_store.stores.jsonfile.appendlog import AppendLog
from plant_store.stores.jsonfile.store import DATA_FILE
from plant_store.stores.records import Plant
from support.forks import write_in_child


class Syscalls:
    _write = staticmethod(os.write)
    _replace = staticmethod(os.replace)

    def __init__(self):
        self.fail_fsync = False

    def _fsync_fd(self, fd):
        if self.fail_fsync:
            raise OSError(errno.EIO, "Input/output error")
        os.fsync(fd)


def open_log(path, syscalls):
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    return AppendLog(str(path), fd, syscalls)


def test_writers_waiting_through_swaps_all_return_durable(tmp_path):
    """Many writers and a thread swapping in shorter files as fast as it can: each swap
    moves every offset back, which once left waiters spinning on offsets past the end."""
    log = open_log(tmp_path / "log", Syscalls())
    acknowledged, stop = [], threading.Event()

    def writer(n):
        for i in range(300):
            line = b"%d-%d" % (n, i)
            with log.cond:
                log.commit(line, (n, i % 3), lambda: lambda: None)
            acknowledged.append(line)

    def swapper():
        while not stop.is_set():
            with log.cond:
                since = log.settled_size()
            tmp = str(tmp_path / "log.new")
            fd = os.open(tmp, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
            with log.cond:
                log.swap(fd, tmp, since)  # keeps only what came after ``since``

    threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(8)]
    swapping = threading.Thread(target=swapper, daemon=True)
    swapping.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    stop.set()
    swapping.join(timeout=10)
    assert not any(t.is_alive() for t in [*threads, swapping]), "a writer never returned"
    assert len(acknowledged) == 8 * 300
    with log.cond:
        log.commit(b"last", "z", lambda: lambda: None)
    kept = (tmp_path / "log").read_bytes().split(b"\n")[:-1]
    # Whole lines, each once, each acknowledged (a swap keeps those after its offset).
    assert kept[-1] == b"last" and len(set(kept)) == len(kept)
    assert set(kept[:-1]) <= set(acknowledged)
    log.close()


def test_a_failed_fsync_drops_every_pending_line_newest_first(tmp_path):
    syscalls = Syscalls()
    log = open_log(tmp_path / "log", syscalls)
    with log.cond:
        log.commit(b"kept", "a", lambda: lambda: None)
    undone, results = [], []
    gate = threading.Barrier(5)

    def writer(n):
        gate.wait()
        try:
            with log.cond:
                log.commit(b"lost%d" % n, n, lambda: lambda: undone.append(n))
            results.append("ok")
        except StoreUnavailable:
            results.append("refused")

    syscalls.fail_fsync = True
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    gate.wait()
    for thread in threads:
        thread.join(timeout=10)
    assert results == ["refused"] * 4 and sorted(undone) == [0, 1, 2, 3]
    assert (tmp_path / "log").read_bytes() == b"kept\n"
    syscalls.fail_fsync = False
    with log.cond:
        log.commit(b"again", "a", lambda: lambda: None)  # not broken: the next one works
    assert (tmp_path / "log").read_bytes() == b"kept\nagain\n"
    log.close()


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_no_write_is_acknowledged_into_a_file_gone_from_its_path(tmp_path, how):
    with JsonFileStore(str(tmp_path)) as store:
        store.create(Plant(1, "before"))
        path = tmp_path / DATA_FILE
        if how == "deleted":
            path.unlink()
        else:
            (tmp_path / "other").write_bytes(b"")
            os.replace(tmp_path / "other", path)
        with pytest.raises(StoreUnavailable, match=how):
            store.create(Plant(2, "after"))
        assert store.get(2) is None
        with pytest.raises(StoreUnavailable, match="restart"):
            store.check()
        with pytest.raises(StoreUnavailable):
            store.delete(1)


def test_failed_writes_are_logged_without_flooding(tmp_path, caplog):
    from support.faulty_stores import FaultyStore

    with FaultyStore(str(tmp_path)) as store:
        store.fail_write = True
        with caplog.at_level(logging.ERROR, "plant_store.stores.appendlog"):
            for plant_id in range(50):
                with pytest.raises(StoreUnavailable):
                    store.create(Plant(plant_id, "x"))
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1 and "No space left on device" in lines[0]


def test_a_change_refused_after_its_write_leaves_no_line_behind(tmp_path):
    """2**63 encodes as JSON but does not fit the creation order's int64s: the order
    refuses it after the line is written, and the line must go with it."""
    with JsonFileStore(str(tmp_path)) as store:
        store.create(Plant(1, "a"))
        with pytest.raises(OverflowError):
            store.create(Plant(2**63, "too big"))
        store.create(Plant(2, "b"))
    assert b"too big" not in (tmp_path / DATA_FILE).read_bytes()
    with JsonFileStore(str(tmp_path)) as store:  # and it opens: no stray record
        assert [p.id for p in store.page(0, 10)[0]] == [1, 2]


def test_a_fork_that_runs_no_python_hooks_still_refuses_and_lets_the_lock_go(tmp_path):
    """uWSGI forks its workers without Python's fork hooks: the write itself notices."""
    import ctypes

    store = JsonFileStore(str(tmp_path))
    store.create(Plant(1, "parent's"))
    told, tell = os.pipe()  # child -> parent: what happened
    done, finish = os.pipe()  # parent -> child: the parent has checked; exit
    # PyDLL keeps the GIL across the call (CDLL lets go of it, and a thread that took it
    # then, the access log's flusher or xdist's, left the child waiting for it forever).
    pid = ctypes.PyDLL(None).fork()
    if pid == 0:
        try:
            os.write(tell, write_in_child(store))
            os.read(done, 1)  # stay alive, its lock copy closed, while the parent reopens
        finally:
            os._exit(0)  # never back into the test runner
    try:
        outcome = os.read(told, 1000).decode()
        assert outcome.startswith("refused") and "before a fork" in outcome
        store.close()  # the child closed its copy of the lock: ours was the last
        with JsonFileStore(str(tmp_path)) as again:
            assert [p.id for p in again.page(0, 10)[0]] == [1]
    finally:
        os.write(finish, b"x")
        for _ in range(100):  # a child that cannot end is killed, not waited for forever
            if os.waitpid(pid, os.WNOHANG)[0]:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
