"""Files made, opened and replaced safely, at the bottom so that the stores, the token file
and the command line share one way of each: a file replaced so that the replacement
survives a power loss, a file opened only when it is regular and reached without a link,
and a marker made once per server start."""

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from typing import BinaryIO

# Replace a file so that the replacement survives a power loss. ``os.replace`` is atomic,
# but the rename is a change to the directory, which sits in the page cache until the
# directory itself is fsynced: without that, a power loss can bring the old file back (or
# none, for a new one). The caller has already flushed and fsynced ``tmp``.


def replace(tmp: str, path: str, *, fsync: Callable[[int], None] = os.fsync) -> None:
    """Rename ``tmp`` over ``path``, then fsync their directory (``fsync``: a test's seam)."""
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)), fsync)


def fsync_dir(directory: str, fsync: Callable[[int], None] = os.fsync) -> None:
    """Make a rename or a new entry in ``directory`` durable."""
    fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def replacing(path: str, check: Callable[[int, str], None] = lambda directory, name: None
              ) -> Iterator[BinaryIO]:
    """A file for ``path``'s new content, made beside it (mode 0600). When the block ends
    without an error it is fsynced and renamed over ``path``, the directory fsynced: after
    any crash ``path`` holds its old content or the new, whole. On an error it is removed
    and ``path`` is untouched. ``check(directory, name)`` may refuse first (raise).

    Invariant: the directory is opened once, and every step (``check``, the temporary
    file's creation, the rename, the fsync, the cleanup) names it by that descriptor,
    never by its path again: swapping the directory, or a parent, for a link meanwhile
    cannot move the new content anywhere else (the hostile pass on issue 42)."""
    directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    name = os.path.basename(path)
    tmp = f".{name}.{secrets.token_hex(6)}"
    try:
        check(directory, name)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                     dir_fd=directory)
        try:
            with os.fdopen(fd, "wb") as out:
                yield out
                out.flush()
                os.fsync(out.fileno())
            os.rename(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
            os.fsync(directory)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):  # gone if the rename was made
                os.unlink(tmp, dir_fd=directory)
            raise
    finally:
        os.close(directory)


# Opening a file that someone else may have put in place. The service user can write in
# the data directory, so a symbolic link there could make root (running ``export``, say)
# truncate any file it points at: a link is never followed. A FIFO would block the reader
# forever (an open for reading waits for a writer), and a device could stream without end.
# Pass :func:`opener` to ``open``, or call it as ``os.open``; anything but a regular file,
# reached without a link, is an ``OSError`` whose ``strerror`` says which.

LINK = "it is a symbolic link, which plant-store never follows"


def opener(path: str, flags: int, mode: int = 0o644) -> int:
    """``os.open`` of a regular file reached without a link; else an ``OSError`` whose
    ``strerror`` says why (pass it to ``open`` as its ``opener``)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP and os.path.islink(path):
            raise OSError(errno.ELOOP, LINK) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return fd


# A thing said once per server start, across the worker processes of a pre-fork server. A
# gunicorn worker recycled by ``--max-requests`` opens the service anew, and would say at
# each start what it said at the first (62 identical warnings in 15 s). The master names a
# folder of markers in the environment before it forks (ONCE_ENV, set by
# ``plant_store.gunicorn_hooks``); the first process to make a marker there says it, the
# others keep quiet (``O_EXCL``: one maker, however many start at once). Without the
# folder (``plant-store serve``: one process a start) everything is said.

ONCE_ENV = "PLANT_STORE_ONCE_DIR"


def first_this_start(name: str) -> bool:
    """Whether this process is the first of this server start to say ``name``."""
    folder = os.environ.get(ONCE_ENV)
    if not folder:
        return True
    try:
        os.close(os.open(os.path.join(folder, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                         0o600))
    except FileExistsError:
        return False
    except OSError:
        return True  # a folder gone or unwritable: say it rather than never
    return True
