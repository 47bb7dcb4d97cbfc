"""Real small or read-only filesystems for fault tests (tmpfs; needs mount rights)."""

import contextlib
import subprocess

import pytest


def _mount(*args):
    return subprocess.run(["mount", *args], capture_output=True, text=True)


@contextlib.contextmanager
def tmpfs(path, size):
    """Mount a tmpfs of ``size`` bytes at ``path``; skip the test if this machine forbids it."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        result = _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    except FileNotFoundError:
        pytest.skip("no mount command on this machine")
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {result.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def remount(path, mode):
    """Switch a mounted tmpfs to ``ro`` or ``rw``."""
    result = _mount("-o", f"remount,{mode}", str(path))
    assert result.returncode == 0, result.stderr
