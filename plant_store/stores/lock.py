"""One writer per data directory, enforced by an OS lock that dies with its owner.

Invariant: this process knows the locks it holds (``_held``, by the lock file's device and
inode), so a second store it opens on a data directory it already holds is refused at once:
waiting for itself would wait out ``lock_timeout`` and then blame "another process" with
its own PID. A forked child inherits the record under its parent's PID, so it is told of
the parent as of any other process.
"""

import fcntl
import logging
import os
import threading
import time

from plant_store.stores.base import DataDirError, StoreError
from plant_store.util import files

POLL_INTERVAL = 0.05  # seconds between tries while waiting for the owner to let go
LOCK_FILE = "plants.lock"


log = logging.getLogger(__name__)

_held: dict[tuple[int, int], tuple[int, int]] = {}  # lock file -> (PID, descriptor) holding it
_registry = threading.Lock()


class StoreLocked(StoreError):
    """Another process, or another store of this one, holds the data directory."""


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
        raise DataDirError(f"data directory {data_dir}: {files.LINK}; name "
                           f"{os.path.realpath(data_dir)} instead")
    return acquire(os.path.join(data_dir, LOCK_FILE), timeout)


def acquire(path: str, timeout: float = 0.0) -> int:
    """Lock ``path`` exclusively and write our PID into it; return the open descriptor.

    Waits up to ``timeout`` seconds for the owner to let go (a reload's new worker while
    the old one finishes its requests), polling: a blocking ``flock`` can be bounded only
    by a signal, and signals belong to the main thread.
    """
    try:
        fd = files.opener(path, os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        raise DataDirError(f"cannot open lock file {path}: {exc.strerror}") from None
    deadline = time.monotonic() + timeout
    directory = os.path.abspath(os.path.dirname(path))
    try:
        waiting, unnamed = False, 0
        while not _try_lock(fd):
            if _ours(fd):
                raise StoreLocked(f"this process already has {directory} open: one store per "
                                  "data directory per process; close it first, or share it "
                                  "(create_app(config, store=...))")
            owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            if owner == "unknown" and unnamed < 20:  # locked, its PID not yet written
                unnamed += 1
                time.sleep(0.005)
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise StoreLocked(
                    f"{os.path.dirname(path) or '.'} is in use by another plant-store process "
                    f"(PID {owner}); stop it or choose another data directory")
            if not waiting:
                log.warning("%s is in use by another plant-store process (PID %s); waiting up "
                            "to %g s (lock_timeout) for it to let go", directory, owner, timeout)
                waiting = True
            time.sleep(min(POLL_INTERVAL, left))
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        with _registry:
            _held[_identity(fd)] = (os.getpid(), fd)
    except OSError as exc:
        os.close(fd)
        raise DataDirError(f"cannot write lock file {path}: {exc.strerror}") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def release(fd: int) -> None:
    """Let go of a lock that :func:`acquire` returned, closing its descriptor."""
    with _registry:
        try:
            key = _identity(fd)
        except OSError:
            key = None
        if key is not None and _held.get(key) == (os.getpid(), fd):
            del _held[key]
    os.close(fd)


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _ours(fd: int) -> bool:
    """Whether this process holds the lock of the file ``fd`` is open on."""
    with _registry:
        return _held.get(_identity(fd), (None,))[0] == os.getpid()


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
