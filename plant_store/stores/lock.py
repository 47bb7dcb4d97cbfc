"""One writer per data directory, enforced by an OS lock that dies with its owner."""

import fcntl
import os
import time

from plant_store import regular_files
from plant_store.stores.base import DataDirError, StoreError

POLL_INTERVAL = 0.05  # seconds between tries while waiting for the owner to let go
LOCK_FILE = "plants.lock"


class StoreLocked(StoreError):
    """Another process holds the data directory."""


def hold(data_dir: str, timeout: float = 0.0) -> int:
    """Make ``data_dir`` if need be and lock it for this process (``acquire``), whatever
    store keeps the data: two processes must never both acknowledge writes for it. A data
    directory that is a symbolic link is refused: whoever can write beside it could point it
    elsewhere between two opens."""
    try:
        os.makedirs(data_dir, exist_ok=True)
    except OSError as exc:
        raise DataDirError(f"cannot create data directory {data_dir}: {exc.strerror}") from None
    if os.path.islink(os.path.normpath(data_dir)):  # 'link/.' and 'link/' are the link too
        raise DataDirError(f"data directory {data_dir}: {regular_files.LINK}; name "
                           f"{os.path.realpath(data_dir)} instead")
    return acquire(os.path.join(data_dir, LOCK_FILE), timeout)


def acquire(path: str, timeout: float = 0.0) -> int:
    """Lock ``path`` exclusively and write our PID into it; return the open descriptor.

    Waits up to ``timeout`` seconds for the owner to let go (a reload's new worker while
    the old one finishes its requests), polling: a blocking ``flock`` can be bounded only
    by a signal, and signals belong to the main thread.
    """
    try:
        fd = regular_files.opener(path, os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        raise DataDirError(f"cannot open lock file {path}: {exc.strerror}") from None
    deadline = time.monotonic() + timeout
    try:
        while not _try_lock(fd):
            left = deadline - time.monotonic()
            if left <= 0:
                owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
                raise StoreLocked(
                    f"{os.path.dirname(path) or '.'} is in use by another plant-store process "
                    f"(PID {owner}); stop it or choose another data directory")
            time.sleep(min(POLL_INTERVAL, left))
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise DataDirError(f"cannot write lock file {path}: {exc.strerror}") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
