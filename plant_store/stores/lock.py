"""One writer per data directory, enforced by an OS lock that dies with its owner."""

import fcntl
import os

from plant_store.stores.base import StoreError


class StoreLocked(StoreError):
    """Another process holds the data directory."""


def acquire(path: str) -> int:
    """Lock ``path`` exclusively and write our PID into it; return the open descriptor."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise StoreError(f"cannot open lock file {path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise StoreLocked(
            f"{os.path.dirname(path) or '.'} is in use by another plant-store process "
            f"(PID {owner}); stop it or choose another data directory"
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise StoreError(f"cannot write lock file {path}: {exc.strerror}") from None
    return fd
