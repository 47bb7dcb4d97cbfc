"""Opening a file that someone else may have put in place. The service user can write in
the data directory, so a symbolic link there could make root (running ``export``, say)
truncate any file it points at: a link is never followed. A FIFO would block the reader
forever (an open for reading waits for a writer), and a device could stream without end.
Pass :func:`opener` to ``open``, or call it as ``os.open``; anything but a regular file,
reached without a link, is an ``OSError`` whose ``strerror`` says which."""

import errno
import os
import stat

LINK = "it is a symbolic link, which plant-store never follows"


def opener(path: str, flags: int, mode: int = 0o644) -> int:
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

