"""Opening a file that someone else may have put in place: a FIFO there would block the
reader forever (an open for reading waits for a writer), and a device could stream without
end. Pass :func:`opener` to ``open``; anything but a regular file is an ``OSError``."""

import errno
import os
import stat


def opener(path: str, flags: int) -> int:
    fd = os.open(path, flags | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return fd
