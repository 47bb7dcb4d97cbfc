"""A throwaway PostgreSQL server for the tests: its own cluster in a temporary directory,
reached only through a Unix socket there, and stopped or killed by PID.

``initdb`` and ``postgres`` refuse to run as root, so under root they run as the
``postgres`` user (Debian's package makes it) in a directory it owns. The postmaster is
started directly, not through ``pg_ctl``, in a session of its own: it is this process's
child, so its PID (the one ``postmaster.pid`` names) is known and it is reaped, never left
a zombie. ``fsync`` and ``synchronous_commit`` stay on: the store's durability is tested
against them.
"""

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time

import psycopg
from psycopg import sql

from support.needs import NO_POSTGRES, needed
from support.servers import free_port

SUPERUSER = "postgres"
START_TIMEOUT = 30.0  # seconds; crash recovery after kill() is included
STOP_TIMEOUT = 30.0


def find_bindir() -> str | None:
    """The directory holding ``initdb`` and ``postgres``, or None when the server is not
    installed (``pg_config`` alone may come from libpq-dev, without a server)."""
    candidates = []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        candidates.append(subprocess.run(["pg_config", "--bindir"], capture_output=True,
                                         text=True, timeout=10, check=True).stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                         key=lambda d: int(d.split("/")[-2]) if d.split("/")[-2].isdigit()
                         else 0, reverse=True)
    postgres = shutil.which("postgres")
    if postgres:
        candidates.append(os.path.dirname(os.path.realpath(postgres)))
    for bindir in candidates:
        if all(os.access(os.path.join(bindir, name), os.X_OK) for name in ("initdb", "postgres")):
            return bindir
    return None


class PostgresServer:
    """One cluster, started and stopped as often as a test needs; :meth:`cleanup` removes it.

    The directory (``base``) holds ``data/`` (the cluster), ``server.log`` and the socket.
    """

    def __init__(self, bindir: str) -> None:
        self.bindir = bindir
        self.base = tempfile.mkdtemp(prefix="plant-store-pg-", dir="/tmp")
        self.data = os.path.join(self.base, "data")
        self.log_path = os.path.join(self.base, "server.log")
        self.port: int | None = None  # None: the Unix socket only
        self._process: subprocess.Popen | None = None
        # Under root, run as the postgres user; anyone else runs the server as themselves.
        self._user = pwd.getpwnam(SUPERUSER) if os.geteuid() == 0 else None
        if self._user:
            os.chown(self.base, self._user.pw_uid, self._user.pw_gid)
        os.chmod(self.base, 0o700)
        self._run([os.path.join(bindir, "initdb"), "-D", self.data, "-U", SUPERUSER,
                   "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync",
                   "--no-instructions"])

    @property
    def pid(self) -> int | None:
        """The postmaster's PID, from ``postmaster.pid`` (None when it is not running)."""
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as fh:
                pid = int(fh.readline())
        except (OSError, ValueError):
            return None
        return pid if self._process and self._process.pid == pid else None

    def start(self, *, tcp: bool = False, port: int | None = None,
              settings: dict[str, str] | None = None) -> None:
        """Start the server and return once it accepts connections. With ``tcp`` it also
        listens on 127.0.0.1, on ``port`` or a free port below 32768 (above, ports collide
        with the ephemeral ones the OS hands out). ``settings`` add to or override ours."""
        if self._process is not None and self._process.poll() is None:
            raise RuntimeError("the server is running")
        self.port = (port or _free_port()) if tcp else None
        settings = {
            "listen_addresses": "127.0.0.1" if tcp else "",
            "unix_socket_directories": self.base,
            "port": str(self.port or 5432),
            "fsync": "on",
            "synchronous_commit": "on",
            "max_connections": "200",
            **(settings or {}),
        }
        args = [os.path.join(self.bindir, "postgres"), "-D", self.data]
        for name, value in settings.items():
            args += ["-c", f"{name}={value}"]
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.base,
                start_new_session=True, **self._as_user())
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise

    def stop(self) -> None:
        """Fast shutdown (SIGINT: sessions are ended, then a checkpoint), waiting at most
        STOP_TIMEOUT seconds; past that the server is killed."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"PostgreSQL did not stop within {STOP_TIMEOUT:g} s; "
                               f"killed it; see {self.log_path}") from None
        self._process = None

    def kill(self) -> None:
        """SIGKILL the postmaster and each of its children (backends, background workers),
        by PID, as a crash of the whole server would; wait until all are gone, so that
        :meth:`start` can follow (it then runs crash recovery). Each child is a process
        group of its own (PostgreSQL calls setsid), so they are found by their parent, with
        the postmaster stopped (SIGSTOP) meanwhile so that it forks no more."""
        process = self._process
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGSTOP)
        children = _children(process.pid)
        for pid in [process.pid, *children]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait(STOP_TIMEOUT)
        deadline = time.monotonic() + STOP_TIMEOUT
        while any(map(alive, children)):  # reparented now; reaped by init, or zombies
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL processes {children} outlived a SIGKILL")
            time.sleep(0.01)
        self._process = None

    def cleanup(self) -> None:
        """Stop the server and remove its directory."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def url(self, dbname: str) -> str:
        """A libpq URL of ``dbname``: the Unix socket, or TCP when started with ``tcp``."""
        if self.port:
            return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"
        return f"postgresql://{SUPERUSER}@/{dbname}?host={self.base}"

    def connect(self, dbname: str = "postgres", **kwargs) -> psycopg.Connection:
        return psycopg.connect(self.url(dbname), connect_timeout=10, **kwargs)

    def create_database(self, name: str) -> str:
        """Create ``name`` afresh (dropping any database of that name); return its URL."""
        self.drop_database(name)
        with self.connect(autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop ``name`` if it exists, ending any sessions still connected to it."""
        with self.connect(autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                         .format(sql.Identifier(name)))

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(self.log_path, errors="replace") as fh:
                return "".join(fh.readlines()[-lines:])
        except OSError:
            return ""

    def _wait_ready(self) -> None:
        """Wait for ``postmaster.pid`` to name our process and say ``ready`` (what
        ``pg_ctl -w`` waits for)."""
        deadline = time.monotonic() + START_TIMEOUT
        pid_file = os.path.join(self.data, "postmaster.pid")
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"PostgreSQL exited with status {self._process.returncode} "
                                   f"at start:\n{self.log_tail()}")
            with contextlib.suppress(OSError):
                with open(pid_file) as fh:
                    lines = fh.read().splitlines()
                # Line 1: the PID; line 8: the status, once the postmaster has set it.
                if (len(lines) >= 8 and lines[0] == str(self._process.pid)
                        and lines[7].strip() == "ready"):
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL was not ready within {START_TIMEOUT:g} s:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.02)

    def _as_user(self) -> dict:
        if not self._user:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}

    def _run(self, args: list[str]) -> None:
        result = subprocess.run(args, capture_output=True, text=True, timeout=120,
                                cwd=self.base, **self._as_user())
        if result.returncode:
            raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}):\n"
                               f"{result.stdout}{result.stderr}")


def _free_port() -> int:
    """A TCP port below 32768 that nothing listens on now, from this xdist worker's own
    range (support.servers.free_port)."""
    return free_port()


def _stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command: state, parent PID, ..."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _children(parent: int) -> list[int]:
    return [int(pid) for pid in os.listdir("/proc")
            if pid.isdigit() and (_stat(pid) or ["", ""])[1] == str(parent)]


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie has let go of everything: it counts as gone)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def a_postgres_server():
    """A throwaway PostgreSQL server of its own, yielded started and removed afterwards,
    for fixtures that stop or reconfigure theirs (and the ``postgres`` fixture's, shared by
    the run). Without the server binaries the test skips; in CI it fails."""
    server = PostgresServer(needed(find_bindir(), NO_POSTGRES, "postgresql package",
                                   "PostgreSQL"))
    try:
        server.start()
        yield server
    finally:
        server.cleanup()
