"""The directory where a pre-fork server's workers count their metrics: one the service
makes for each start and owns, inside the one the user names (issue 49).

``PROMETHEUS_MULTIPROC_DIR`` names a directory the user owns, which other programs, and
other instances of the service, may share. The service never empties it, nor removes or
rewrites anything there but its own: at each start the master makes a subdirectory of its
own there (:class:`OwnDirectory`), named ``plant-store-metrics-<pid>-<random>``, and names
that one to its workers in ``PROMETHEUS_MULTIPROC_DIR`` before they fork; each worker
counts in files there, a scrape sums those, and the ended workers' archive
(:mod:`plant_store.metrics.archive`) is kept there too. So two services given one
directory count apart, and a start begins from zero, as it always did (the directory was
emptied at each start before). Without the variable, the subdirectory is made in the
system's temporary directory instead.

Invariants:

- The subdirectory is made with ``mkdir`` (it cannot have existed: a random name, and
  ``mkdir`` fails on one that does), mode 0700, and held open by its marker,
  ``plant-store.owner``: a regular file made with ``O_EXCL | O_NOFOLLOW`` in it, locked
  (``flock``) by the master for as long as the service runs, and only then written with
  :data:`MAGIC`. Forked workers share the lock (one open file description).
- At its stop the master removes, in the subdirectory it made (the same one: checked by
  its device and inode, opened with ``O_NOFOLLOW`` from a descriptor of the configured
  directory), only the names the service makes (:data:`_MADE`: the client's files, the
  archive, its lock, the marker), then the subdirectory if that left it empty.
- A subdirectory of an earlier start that crashed is removed the same way at a later
  start, and only when it is provably ours and provably dead: its name matches, it is a
  directory of this user (not a link), its marker is a regular file beginning with
  :data:`MAGIC`, and its lock can be taken, so no live master (or worker) holds it.
- The configured directory itself is made when missing, and refused, in one line, when it
  is a symbolic link (``name the directory itself``): a link would let the service count,
  and clean up, in whatever directory it is pointed at next. Entries of it that are links
  are never followed nor removed.
- A master started again by exec (gunicorn's USR2 upgrade) inherits its predecessor's
  subdirectory in ``PROMETHEUS_MULTIPROC_DIR``: a configured path whose last part is
  named as ours stands for its parent, so the new master makes a subdirectory of its own
  beside the old one's, not inside it.
"""

import contextlib
import errno
import fcntl
import os
import re
import secrets
import stat
import tempfile
from typing import TYPE_CHECKING

from plant_store.stores import StoreError

if TYPE_CHECKING:
    from plant_store.config import Config

ENV = "PROMETHEUS_MULTIPROC_DIR"
PREFIX = "plant-store-metrics-"
OWNER = "plant-store.owner"  # the marker: a live service holds its lock
MAGIC = b"plant-store metrics directory, removed at the service's stop\n"
# Each worker's files grow a page at a time through mmap: on a full file system the write
# faults and the kernel kills the worker (SIGBUS), mid-request, after its commit.
MIN_FREE = 64 << 20  # bytes free in the directory at start
_OURS = re.compile(rf"{re.escape(PREFIX)}\d+-[0-9a-f]{{16}}")
# What the service makes in its subdirectory: the client's files (counter, histogram,
# summary and gauge files by PID), the archive (``*_dead.db``, its ``.new``), the
# archive's lock and the marker.
_MADE = re.compile(r"(?:(?:counter|histogram|summary|gauge_[a-z]+)_(?:\d+|dead)\.db"
                   r"(?:\.new)?|merge\.lock|" + re.escape(OWNER) + ")")
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class DirectoryError(Exception):
    """The directory cannot take the workers' counts (why, in a few words)."""


class OwnDirectory:
    """The service's subdirectory of ``configured`` (None: the system's temporary
    directory) for one start: named at once (:attr:`path`, for the environment before
    anything reads it), made by :meth:`open`, removed by :meth:`close`."""

    def __init__(self, configured: str | None) -> None:
        # Absolute: the workers may start elsewhere (gunicorn's --chdir). The temporary
        # directory, which the user did not name, is taken as it resolves.
        parent = (os.path.abspath(configured) if configured
                  else os.path.realpath(tempfile.gettempdir()))
        if _OURS.fullmatch(os.path.basename(parent)):  # a predecessor's, inherited by exec
            parent = os.path.dirname(parent)
        self.parent = parent
        self.name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
        self.path = os.path.join(parent, self.name)
        self._owner: int | None = None  # the marker's descriptor, locked, once open
        self._identity: tuple[int, int] = (0, 0)  # the subdirectory's device and inode

    def open(self) -> str:
        """Make the subdirectory and its marker, lock it, check it can take the workers'
        files, and remove dead starts' subdirectories beside it; DirectoryError (nothing
        left behind) when it cannot."""
        parent = _open_parent(self.parent)
        try:
            os.mkdir(self.name, 0o700, dir_fd=parent)
            made = os.open(self.name, _DIRECTORY, dir_fd=parent)
            try:
                info = os.fstat(made)
                self._identity = (info.st_dev, info.st_ino)
                owner = os.open(OWNER, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                                | os.O_CLOEXEC, 0o600, dir_fd=made)
                self._owner = owner
                fcntl.flock(owner, fcntl.LOCK_EX)  # before MAGIC: a cleaner skips it till then
                os.write(owner, MAGIC + f"pid {os.getpid()}\n".encode())
                stats = os.fstatvfs(made)
            finally:
                os.close(made)
            free = stats.f_bavail * stats.f_frsize
            if free < MIN_FREE:
                raise DirectoryError(f"{free >> 20} MiB free; the workers' metrics need at "
                                     f"least {MIN_FREE >> 20} MiB")
            with contextlib.suppress(OSError):  # what cannot be cleaned up stays; no reason
                _remove_dead(parent, self.name)  # to refuse the start
        except OSError as exc:
            self.close()
            raise DirectoryError(exc.strerror or str(exc)) from None
        except DirectoryError:
            self.close()
            raise
        finally:
            os.close(parent)
        return self.path

    def close(self) -> None:
        """Remove what the service made in its subdirectory, then the subdirectory if that
        emptied it (another's files there stay, and so does it), and let go of the lock."""
        try:
            parent = os.open(self.parent, _DIRECTORY)
        except OSError:
            parent = None
        try:
            if parent is not None:
                _remove_own(parent, self.name, self._identity)
        finally:
            if parent is not None:
                os.close(parent)
            if self._owner is not None:
                os.close(self._owner)  # lets go of the lock
                self._owner = None


class MetricsDirectory:
    """The granian master's (``plant-store serve --server granian``): an
    :class:`OwnDirectory`, when its workers share their counts, named to them in
    ``PROMETHEUS_MULTIPROC_DIR``. None is used by one worker, which counts in its own
    memory (cheaper), unless the variable names a directory.

    Granian's workers end only with the server (plant-store neither respawns nor recycles
    them; one that dies stops the others), so no worker's files are merged while it runs;
    :meth:`close`, run once every worker has ended, removes the subdirectory (the counts
    of a start end with it, as they did when the next start emptied the directory) and
    leaves the environment as it found it."""

    def __init__(self, config: "Config") -> None:
        self._given = os.environ.get(ENV) or None
        self._used = config.metrics != "off" and (config.workers > 1 or bool(self._given))
        self._own: OwnDirectory | None = None
        self.path: str | None = None  # once open

    def open(self) -> str | None:
        """The subdirectory, made and named to the workers (None: each counts alone), or
        StoreError saying why it cannot serve."""
        if not self._used:
            return None
        own = OwnDirectory(self._given)
        try:
            own.open()
        except DirectoryError as exc:
            raise StoreError(f"{ENV}={self._given or own.parent}: {exc}") from None
        self._own, self.path = own, own.path
        os.environ[ENV] = own.path
        return own.path

    def close(self) -> None:
        """Once every worker has ended: the subdirectory gone, the variable as it was."""
        if self._own is None:
            return
        self._own.close()
        self._own = self.path = None
        if self._given:
            os.environ[ENV] = self._given
        else:
            os.environ.pop(ENV, None)


def _open_parent(path: str) -> int:
    """A descriptor of the configured directory, made if missing; a link is refused."""
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise DirectoryError("a symbolic link; name the directory itself")
    except FileNotFoundError:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise DirectoryError(exc.strerror or str(exc)) from None
    except OSError as exc:
        raise DirectoryError(exc.strerror or str(exc)) from None
    try:
        return os.open(path, _DIRECTORY)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # made a link since the look
            raise DirectoryError("a symbolic link; name the directory itself") from None
        raise DirectoryError(exc.strerror or str(exc)) from None


def _remove_dead(parent: int, own: str) -> None:
    """Remove each subdirectory beside ``own`` that an earlier start made and left when it
    died: named as ours, a directory of this user, its marker ours and its lock free."""
    for name in os.listdir(parent):
        if name == own or not _OURS.fullmatch(name):
            continue
        try:
            directory = os.open(name, _DIRECTORY, dir_fd=parent)
        except OSError:  # a link, not a directory, gone
            continue
        try:
            info = os.fstat(directory)
            if info.st_uid != os.geteuid():
                continue
            try:
                marker = os.open(OWNER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                                 | os.O_CLOEXEC, dir_fd=directory)  # a FIFO: no wait
            except OSError:
                continue  # not provably ours
            try:
                if not stat.S_ISREG(os.fstat(marker).st_mode):
                    continue
                try:
                    fcntl.flock(marker, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live service's
                if os.read(marker, len(MAGIC)) != MAGIC:
                    continue
                _remove_own(parent, name, (info.st_dev, info.st_ino))
            finally:
                os.close(marker)
        finally:
            os.close(directory)


def _remove_own(parent: int, name: str, identity: tuple[int, int]) -> None:
    """In ``name`` under ``parent``, if it is still the directory ``identity`` names, remove
    the names the service makes (the marker last), then ``name`` if that emptied it."""
    try:
        directory = os.open(name, _DIRECTORY, dir_fd=parent)
    except OSError:
        return
    try:
        info = os.fstat(directory)
        if (info.st_dev, info.st_ino) != identity:
            return  # not the one made (or checked): leave it
        names = [entry for entry in os.listdir(directory) if _MADE.fullmatch(entry)]
        for entry in sorted(names, key=lambda entry: entry == OWNER):
            with contextlib.suppress(OSError):  # gone, a directory, not ours to remove
                os.unlink(entry, dir_fd=directory)  # a link itself, never what it names
    finally:
        os.close(directory)
    with contextlib.suppress(OSError):  # not empty: another's files stay, and so does it
        os.rmdir(name, dir_fd=parent)

