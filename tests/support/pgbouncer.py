"""A throwaway pgbouncer in front of a throwaway PostgreSQL server, for the topology tests.

Debian's ``/usr/sbin/pgbouncer`` runs as a process of this one, with an ini file written
into a temporary directory of its own: it listens on 127.0.0.1 on a free port (no Unix
socket), lets every database through to the PostgreSQL server (``* = host=... port=...``),
authenticates by ``trust`` with an ``auth_file`` naming the superuser, and pools in the
``pool_mode`` asked for with a small ``default_pool_size``. Everything else is pgbouncer's
default, as an operator who installs it would have it: in particular no
``ignore_startup_parameters`` (``extra`` adds settings, e.g. that one, to measure what the
usual operator fix does).

pgbouncer refuses to run as root, so under root it runs as the ``postgres`` user (as
tests/support/pgserver.py runs PostgreSQL). It is stopped by PID: SIGTERM (its immediate shutdown),
then SIGKILL.
"""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from support.pgserver import SUPERUSER, PostgresServer, _free_port, find_bindir

PGBOUNCER = "/usr/sbin/pgbouncer"
START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0


def find_pgbouncer() -> str | None:
    """pgbouncer's executable, or None when it is not installed."""
    for path in (PGBOUNCER, shutil.which("pgbouncer")):
        if path and os.access(path, os.X_OK):
            return path
    return None


class PgBouncer:
    """pgbouncer in ``pool_mode`` (``session`` or ``transaction``) in front of ``server``
    (a PostgresServer started with ``tcp=True``); :meth:`cleanup` stops it and removes its
    directory (``base``: ``pgbouncer.ini``, ``userlist.txt``, ``pgbouncer.log``)."""

    def __init__(self, server: PostgresServer, pool_mode: str, *, pool_size: int = 4,
                 extra: dict[str, str] | None = None, executable: str | None = None) -> None:
        if server.port is None:
            raise ValueError("pgbouncer reaches PostgreSQL over TCP: start it with tcp=True")
        self.server = server
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.executable = executable or find_pgbouncer() or PGBOUNCER
        self.base = tempfile.mkdtemp(prefix="plant-store-pgbouncer-", dir="/tmp")
        self.ini_path = os.path.join(self.base, "pgbouncer.ini")
        self.log_path = os.path.join(self.base, "pgbouncer.log")
        self.port: int | None = None
        self._extra = dict(extra or {})
        self._process: subprocess.Popen | None = None
        self._as_user = server._as_user()  # the postgres user under root, as the server
        if self._as_user:
            os.chown(self.base, self._as_user["user"], self._as_user["group"])
        os.chmod(self.base, 0o700)

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def _write_config(self) -> None:
        userlist = os.path.join(self.base, "userlist.txt")
        settings = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(self.port),
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": userlist,
            "pool_mode": self.pool_mode,
            "default_pool_size": str(self.pool_size),
            "max_client_conn": "200",
            "admin_users": SUPERUSER,
            "pidfile": os.path.join(self.base, "pgbouncer.pid"),
            **self._extra,
        }
        lines = ["[databases]", f"* = host=127.0.0.1 port={self.server.port}", "",
                 "[pgbouncer]", *(f"{name} = {value}" for name, value in settings.items())]
        for path, text in ((self.ini_path, "\n".join(lines) + "\n"),
                           (userlist, f'"{SUPERUSER}" ""\n')):
            with open(path, "w") as fh:
                fh.write(text)
            if self._as_user:
                os.chown(path, self._as_user["user"], self._as_user["group"])

    def start(self) -> None:
        """Start pgbouncer and return once it accepts connections."""
        if self.pid is not None:
            raise RuntimeError("pgbouncer is running")
        self.port = _free_port()
        self._write_config()
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                [self.executable, self.ini_path], stdin=subprocess.DEVNULL, stdout=log,
                stderr=log, cwd=self.base, start_new_session=True, **self._as_user)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with status {self._process.returncode} "
                                   f"at start:\n{self.log_tail()}")
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=1):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pgbouncer was not listening within {START_TIMEOUT:g} s:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.02)

    def stop(self) -> None:
        """SIGTERM (pgbouncer's immediate shutdown), then SIGKILL past STOP_TIMEOUT."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
                process.wait(STOP_TIMEOUT)
        self._process = None

    def cleanup(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def url(self, dbname: str) -> str:
        """A libpq URL of ``dbname`` through pgbouncer."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def admin(self, command: str) -> list[dict[str, str]]:
        """Run ``command`` (``SHOW POOLS``, ...) on pgbouncer's admin console, with psql
        (the console speaks only the simple query protocol); rows as dicts."""
        psql = os.path.join(find_bindir() or "/usr/bin", "psql")
        result = subprocess.run(
            [psql, "-X", "-A", "-F", "\t", "-P", "footer=off", "-h", "127.0.0.1", "-p",
             str(self.port), "-U", SUPERUSER, "-d", "pgbouncer", "-c", command],
            capture_output=True, text=True, timeout=10)
        if result.returncode:
            raise RuntimeError(f"pgbouncer's {command!r}: {result.stderr.strip()}")
        header, *rows = result.stdout.splitlines()
        names = header.split("\t")
        return [dict(zip(names, row.split("\t"), strict=True)) for row in rows]

    def log_text(self) -> str:
        try:
            with open(self.log_path, errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""

    def log_tail(self, lines: int = 20) -> str:
        return "".join(self.log_text().splitlines(keepends=True)[-lines:])
