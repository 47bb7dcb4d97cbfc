"""files.replace: a rename that survives a power loss, because the directory holding it is
fsynced after it."""

import errno
import os
import stat

import pytest

from plant_store.util.files import replace


def files(tmp_path):
    path, tmp = tmp_path / "f.json", tmp_path / "f.json.tmp"
    path.write_text("old")
    tmp.write_text("new")
    return path, tmp


def test_the_directory_is_fsynced_after_the_rename(tmp_path):
    path, tmp = files(tmp_path)
    synced = []

    def fsync(fd):
        st = os.fstat(fd)
        synced.append((stat.S_ISDIR(st.st_mode), st.st_ino, path.read_text()))

    replace(str(tmp), str(path), fsync=fsync)
    assert synced == [(True, os.stat(tmp_path).st_ino, "new")]
    assert not tmp.exists()


def test_a_failed_directory_fsync_is_raised_not_swallowed(tmp_path):
    path, tmp = files(tmp_path)

    def fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    open_fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError) as raised:
        replace(str(tmp), str(path), fsync=fsync)
    assert raised.value.errno == errno.EIO
    assert len(os.listdir("/proc/self/fd")) == open_fds  # the directory's was closed
