"""Replace a file so that the replacement survives a power loss.

``os.replace`` is atomic, but the rename is a change to the directory, which sits in the
page cache until the directory itself is fsynced: without that, a power loss can bring the
old file back (or none, for a new one). The caller has already flushed and fsynced ``tmp``.
"""

import os
from collections.abc import Callable


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
