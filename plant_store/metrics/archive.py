"""Ended workers' counts, merged into one archive in the multiprocess metrics directory.

The Prometheus client keeps each process's counters and histograms in files named by its
PID (``counter_<pid>.db``, ``histogram_<pid>.db``) and a scrape sums every file there, so
an ended worker's files must stay for the totals to stay right (the client's
``mark_process_dead`` removes only live gauges' files). Under gunicorn's ``--max-requests``
that was two more files per recycled worker, for good, each read by every scrape. So when
a worker has ended, the master adds its counts into ``counter_dead.db`` and
``histogram_dead.db`` (the client's own merge, written back in its own format:
:func:`.prometheus_adapter.merge`) and removes its files: the directory holds
those two, ``merge.lock`` and two files per live worker.

Invariant: a scrape counts an ended worker's counts exactly once, in its own files or in
the archive, never both or neither. A merge writes the new archive beside the old (a name
a scrape's ``*.db`` never matches); then, holding ``merge.lock`` exclusively, it swaps it
in and removes the worker's files. A scrape reads holding that lock shared
(:func:`reading`), so it sees the directory before that step or after. The master merges
in its SIGCHLD handler, so it waits at most ``LOCK_WAIT`` for scrapes to finish; when they
hold the lock longer, the merge is put off (the files still count) until a later one.

The directory is one the master made for this start and removes at its stop, inside the
one ``PROMETHEUS_MULTIPROC_DIR`` names (:mod:`plant_store.serving.metrics_directory`), so
it holds this start's files only, and the archive its ended workers' counts.
"""

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

from plant_store.metrics import prometheus_adapter

LOCK = "merge.lock"
KINDS = ("counter", "histogram")  # the kinds of file the service's metrics write
LOCK_WAIT = 0.2  # seconds a merge waits for scrapes to finish (each takes milliseconds)


@contextlib.contextmanager
def reading(directory: str) -> Iterator[None]:
    """Hold the directory still (no merge swaps files) while a scrape reads it."""
    with _locked(directory, fcntl.LOCK_SH):
        yield


def merge_ended(directory: str, pid: int) -> bool:
    """Move the counts of ``pid``, a worker that has ended, into the archive; False (its
    files left as they are, still counted) when scrapes held the lock ``LOCK_WAIT``. One
    merge at a time (the hooks see to it)."""
    swaps = []  # (new archive, archive, the worker's file)
    for kind in KINDS:
        ended = os.path.join(directory, f"{kind}_{pid}.db")
        if not os.path.exists(ended):
            continue
        archive = os.path.join(directory, f"{kind}_dead.db")
        new = archive + ".new"
        with contextlib.suppress(FileNotFoundError):  # left by a master that died here
            os.unlink(new)
        prometheus_adapter.merge([path for path in (archive, ended) if os.path.exists(path)],
                                 new)
        swaps.append((new, archive, ended))
    try:
        with _locked(directory, fcntl.LOCK_EX | fcntl.LOCK_NB, LOCK_WAIT):
            for new, archive, ended in swaps:
                os.replace(new, archive)
                os.unlink(ended)
    except TimeoutError:
        for new, _, _ in swaps:
            os.unlink(new)
        return False
    return True


@contextlib.contextmanager
def _locked(directory: str, operation: int, wait: float = 0.0) -> Iterator[None]:
    """``merge.lock`` flock()ed; with LOCK_NB, tried for ``wait`` s, then TimeoutError.
    (Linux lets shared holders keep an exclusive waiter out for good: hence the bound.)"""
    fd = os.open(os.path.join(directory, LOCK),
                 os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        give_up = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, operation)
                break
            except BlockingIOError:
                if time.monotonic() > give_up:
                    raise TimeoutError(f"{LOCK} held for {wait:g} s") from None
                time.sleep(0.005)
        yield
    finally:
        os.close(fd)  # releases the lock
