"""Replace a file so that the replacement survives a power loss.

``os.replace`` is atomic, but the rename is a change to the directory, which sits in the
page cache until the directory itself is fsynced: without that, a power loss can bring the
old file back (or none, for a new one). The caller has already flushed and fsynced ``tmp``.
"""

import contextlib
import os
import secrets
from collections.abc import Callable, Iterator
from typing import BinaryIO


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
