"""Stores that fail on demand."""

import errno

from plant_store.stores import JsonFileStore


class FaultyStore(JsonFileStore):
    """Fails the next write or fsync on demand; a failed write may first write a part."""

    def __init__(self, *args, **kwargs):
        self.fail_write = self.fail_fsync = False
        self.partial = 0
        super().__init__(*args, **kwargs)

    def _write(self, fd, data):
        if self.fail_write:
            if self.partial and len(data) > self.partial:
                return JsonFileStore._write(fd, data[: self.partial])
            raise OSError(errno.ENOSPC, "No space left on device")
        return JsonFileStore._write(fd, data)

    def _fsync_fd(self, fd):
        if self.fail_fsync:
            raise OSError(errno.EIO, "Input/output error")
        JsonFileStore._fsync_fd(fd)
