"""The group commit gathers: every create that arrives while an fsync runs is covered by
the next one, a single fsync for all of them (issue 52)."""

import os
import threading
import time

from plant_store.stores.jsonfile.appendlog import AppendLog


class HeldFsync:
    """System calls whose first fsync waits until the test lets it go."""

    _write = staticmethod(os.write)
    _replace = staticmethod(os.replace)

    def __init__(self):
        self.started, self.release, self.count = threading.Event(), threading.Event(), 0

    def _fsync_fd(self, fd):
        self.count += 1
        if self.count == 1:
            self.started.set()
            assert self.release.wait(10)
        os.fsync(fd)


def test_the_creates_arriving_during_an_fsync_share_the_next_one(tmp_path):
    path = str(tmp_path / "log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    syscalls = HeldFsync()
    log = AppendLog(path, fd, syscalls)

    def commit(n):
        with log.cond:
            log.commit(b'{"n": %d}' % n, n, lambda: (lambda: None))

    first = threading.Thread(target=commit, args=(0,))
    first.start()
    assert syscalls.started.wait(10)
    during = [threading.Thread(target=commit, args=(n,)) for n in range(1, 9)]
    for writer in during:
        writer.start()
    deadline = time.monotonic() + 10
    while True:  # all eight wait for the fsync under way (the first pending in it)
        with log.cond:
            if len(log._pending) == 9:
                break
        assert time.monotonic() < deadline
        time.sleep(0.001)
    syscalls.release.set()
    for writer in [first, *during]:
        writer.join(10)
    assert syscalls.count == 2
    with open(path, "rb") as fh:
        assert fh.read().count(b"\n") == 9
    log.close()
