"""Replace a file so that the replacement survives a power loss.

``os.replace`` is atomic, but the rename is a change to the directory, which sits in the
page cache until the directory itself is fsynced: without that, a power loss can bring the
old file back (or none, for a new one). The caller has already flushed and fsynced ``tmp``.
"""

import contextlib
import os
import tempfile
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
def replacing(path: str) -> Iterator[BinaryIO]:
    """A file for ``path``'s new content, made beside it (mode 0600, as ``mkstemp`` makes
    it). When the block ends without an error it is fsynced and renamed over ``path``, the
    directory fsynced: after any crash ``path`` holds its old content or the new, whole. On
    an error it is removed and ``path`` is untouched."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):  # gone if the rename was made
            os.unlink(tmp)
        raise
