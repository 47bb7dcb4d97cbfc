"""A primary and its synchronous standby, for the failover tests, and a load to run
through ``plant-store serve`` while they fail.

Each :class:`Node` is a :class:`pgserver.PostgresServer` listening on 127.0.0.1 on a port
it keeps across restarts (a multi-host URL names the ports once). The standby is a
``pg_basebackup -R`` of the primary, streaming from it under an ``application_name`` the
primary's ``synchronous_standby_names`` names, so each commit waits for the standby to
flush it. :class:`Cluster` kills the primary (``kill -9`` of the postmaster and all its
children, as a crash of the host), promotes the standby (``pg_promote``), builds a fresh
standby of the new primary, freezes a node (SIGSTOP of the postmaster and its children) and
thaws it. Every process is a child of the test, stopped by PID in :meth:`Cluster.cleanup`.

:class:`Load` is N client threads each creating plants with fresh ids, back to back,
recording every attempt; :class:`ReadyPoller` asks ``/ready`` every 100 ms and records how
long each answer took. :func:`tally` turns what they recorded, and the ids the database
holds, into the figures the failover tables report.
"""

import collections
import contextlib
import itertools
import os
import signal
import tempfile
import threading
import time

import psycopg

from support.pgserver import SUPERUSER, PostgresServer, _children, alive
from support.servers import http_request

DATABASE = "plants"
PROMOTE_TIMEOUT = 30  # seconds pg_promote waits for the end of recovery


class Node(PostgresServer):
    """A cluster on 127.0.0.1, or (with ``source``) a streaming standby of ``source`` made
    by ``pg_basebackup -R`` and named ``name`` to it."""

    def __init__(self, bindir: str, name: str, source: "Node | None" = None) -> None:
        self.name = name
        if source is None:
            super().__init__(bindir)
            return
        # PostgresServer's directory, filled by a base backup instead of initdb.
        self.bindir = bindir
        self.base = _tempdir()
        self.data = os.path.join(self.base, "data")
        self.log_path = os.path.join(self.base, "server.log")
        self.port = None
        self._process = None
        self._user = source._user
        if self._user:
            os.chown(self.base, self._user.pw_uid, self._user.pw_gid)
        os.chmod(self.base, 0o700)
        conninfo = (f"host=127.0.0.1 port={source.port} user={SUPERUSER} "
                    f"application_name={name}")
        self._run([os.path.join(bindir, "pg_basebackup"), "-D", self.data, "-d", conninfo,
                   "-R", "-X", "stream", "-c", "fast", "--no-sync"])
        # The primary's own synchronous_standby_names came along: a promoted standby would
        # wait for itself. Its primary says whom to wait for once it is one (set_sync).
        auto = os.path.join(self.data, "postgresql.auto.conf")
        with open(auto) as fh:
            kept = [line for line in fh if not line.startswith("synchronous_standby_names")]
        with open(auto, "w") as fh:
            fh.writelines(kept)

    def start(self, *, port: int | None = None) -> None:
        """Start on ``port``, else the port of the last start, else a free one; return once
        it accepts connections (a standby: read-only ones)."""
        super().start(tcp=True, port=port or self.port, settings={
            "wal_level": "replica",
            "max_wal_senders": "10",
            "hot_standby": "on",
            "wal_keep_size": "256MB",  # a standby built under load catches up from here
            "wal_receiver_status_interval": "1s",
            "cluster_name": self.name,
        })

    def sql(self, query: str, params=None, dbname: str = "postgres", timeout: float = 10):
        """Run ``query`` on a connection of its own; its rows (None when it has none)."""
        with psycopg.connect(self.url(dbname), autocommit=True, connect_timeout=5,
                             options=f"-c statement_timeout={round(timeout * 1000)}") as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else None

    def set_sync(self, names: str) -> None:
        """Make commits wait for the standbys ``names`` ('' for none), from now on."""
        self.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
        self.sql("SELECT pg_reload_conf()")

    def promote(self) -> None:
        """End recovery; return once it has ended (the node takes writes)."""
        (promoted,), = self.sql(f"SELECT pg_promote(true, {PROMOTE_TIMEOUT})",
                                timeout=PROMOTE_TIMEOUT + 5)
        if not promoted:
            raise RuntimeError(f"{self.name} was not promoted within {PROMOTE_TIMEOUT} s:\n"
                               f"{self.log_tail()}")

    def ids(self, dbname: str = DATABASE) -> set[int]:
        """The ids of the plants this node holds."""
        return {plant_id for (plant_id,) in self.sql("SELECT id FROM plant_store_plants",
                                                     dbname=dbname)}

    def processes(self) -> list[int]:
        """The postmaster's PID and its children's."""
        pid = self.pid
        return [] if pid is None else [pid, *_children(pid)]

    def freeze(self) -> None:
        """SIGSTOP the postmaster, then every child of it (it forks no more meanwhile):
        the server still accepts TCP connections (the kernel does), and answers nothing."""
        pid = self.pid
        if pid is None:
            raise RuntimeError(f"{self.name} is not running")
        os.kill(pid, signal.SIGSTOP)
        for child in _children(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT the children, then the postmaster."""
        pid = self.pid
        if pid is None:
            return
        for child in _children(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def _tempdir() -> str:
    return tempfile.mkdtemp(prefix="plant-store-pg-", dir="/tmp")


class Cluster:
    """A primary and one synchronous standby, and every node ever made for them."""

    def __init__(self, bindir: str) -> None:
        self.bindir = bindir
        self.nodes: list[Node] = []
        self._names = itertools.count(1)
        try:
            self.primary = self._node()
            self.primary.start()
            self.primary.sql(f"CREATE DATABASE {DATABASE}")
            self.standby = self.add_standby()
        except BaseException:
            self.cleanup()
            raise
        self.ports = (self.primary.port, self.standby.port)

    def _node(self, source: Node | None = None) -> Node:
        node = Node(self.bindir, f"node{next(self._names)}", source)
        self.nodes.append(node)
        return node

    def url(self, dbname: str = DATABASE) -> str:
        """The libpq multi-host URL of both ports, that connects to the one taking writes."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.ports)
        return (f"postgresql://{SUPERUSER}@{hosts}/{dbname}"
                "?target_session_attrs=read-write")

    def add_standby(self, port: int | None = None, timeout: float = 20) -> Node:
        """A fresh standby of the primary (on ``port``), made its synchronous standby once
        it streams; returns after a commit on the primary was confirmed by it, so that
        every earlier commit is on it too."""
        standby = self._node(self.primary)
        standby.start(port=port)
        self.wait_streaming(standby, timeout)
        self.primary.set_sync(standby.name)
        deadline = time.monotonic() + timeout
        while self.sync_state(standby) != "sync":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{standby.name} did not become synchronous")
            time.sleep(0.05)
        self.primary.sql("CREATE TABLE IF NOT EXISTS pgcluster_mark (at timestamptz)")
        self.primary.sql("INSERT INTO pgcluster_mark VALUES (now())")  # waits for the standby
        return standby

    def sync_state(self, standby: Node) -> str | None:
        rows = self.primary.sql("SELECT sync_state FROM pg_stat_replication "
                                "WHERE application_name = %s AND state = 'streaming'",
                                [standby.name])
        return rows[0][0] if rows else None

    def wait_streaming(self, standby: Node, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while self.sync_state(standby) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{standby.name} does not stream from {self.primary.name}:"
                                   f"\n{standby.log_tail()}")
            time.sleep(0.05)

    def kill_primary(self) -> Node:
        """``kill -9`` of the primary's postmaster and all its processes; returns it."""
        dead = self.primary
        dead.kill()
        return dead

    def promote(self) -> float:
        """Promote the standby and make it the primary, with no synchronous standby yet
        (there is none to wait for). Returns the monotonic time promotion completed."""
        self.standby.promote()
        done = time.monotonic()
        self.primary, self.standby = self.standby, None
        return done

    def rebuild(self, port: int, timeout: float = 20) -> Node:
        """A fresh synchronous standby of the primary, on ``port`` (the old primary's, so
        the service's multi-host URL names it)."""
        self.standby = self.add_standby(port, timeout)
        return self.standby

    def cleanup(self) -> None:
        """Thaw, stop (or kill) and remove every node, each by its PID."""
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.thaw()
            try:
                node.stop()
            except Exception:  # stop() killed it; go on with the others
                node.kill()
            for pid in node.processes():
                if alive(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            node.cleanup()


Attempt = collections.namedtuple("Attempt", "id start end status message")


class Load:
    """``threads`` clients, each creating plants with fresh ids back to back through the
    service at ``port`` (a fresh connection per request, ``timeout`` s at most), until
    :meth:`stop`. Each attempt is recorded: id, start and end (monotonic), the status
    (None: no answer within the client's timeout, or the connection failed) and the
    message of an Error body."""

    def __init__(self, port: int, token: str, threads: int = 16, timeout: float = 15,
                 first_id: int = 1) -> None:
        self.port, self.token, self.timeout = port, token, timeout
        self.attempts: list[Attempt] = []
        self._ids = itertools.count(first_id)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads = [threading.Thread(target=self._run, name=f"load-{n}", daemon=True)
                         for n in range(threads)]

    def __enter__(self) -> "Load":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(self.timeout + 5)

    def _run(self) -> None:
        while not self._stopping.is_set():
            with self._lock:
                plant_id = next(self._ids)
            self.attempts.append(create(self.port, self.token, plant_id, self.timeout))

    def ended_after(self, moment: float, status: int = 200) -> list[Attempt]:
        return [a for a in list(self.attempts) if a.status == status and a.end >= moment]

    def wait_for(self, moment: float, status: int = 200, timeout: float = 15) -> float:
        """The end of the first attempt with ``status`` that ended after ``moment``,
        waiting up to ``timeout`` s for one."""
        deadline = time.monotonic() + timeout
        while True:
            ended = self.ended_after(moment, status)
            if ended:
                return min(a.end for a in ended)
            if time.monotonic() > deadline:
                raise AssertionError(f"no {status} within {timeout} s")
            time.sleep(0.05)


def create(port: int, token: str, plant_id: int, timeout: float = 15) -> Attempt:
    """One create through the service, recorded."""
    start = time.monotonic()
    try:
        status, _, body = http_request("127.0.0.1", port, "POST", "/plants",
                                       {"id": plant_id, "name": f"plant {plant_id}"},
                                       token, timeout=timeout)
    except OSError as exc:
        return Attempt(plant_id, start, time.monotonic(), None, f"no answer: {exc!r}")
    message = body.get("message", "") if isinstance(body, dict) else ""
    return Attempt(plant_id, start, time.monotonic(), status, message)


Probe = collections.namedtuple("Probe", "start end status")


class ReadyPoller:
    """``GET /ready`` every ``every`` s (each with a ``timeout`` s client timeout) until
    :meth:`stop`; each probe is recorded (status None: no answer in time)."""

    def __init__(self, port: int, every: float = 0.1, timeout: float = 2.0) -> None:
        self.port, self.every, self.timeout = port, every, timeout
        self.probes: list[Probe] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ready-poller", daemon=True)

    def __enter__(self) -> "ReadyPoller":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(self.timeout + 5)

    def _run(self) -> None:
        while not self._stopping.is_set():
            start = time.monotonic()
            try:
                status = http_request("127.0.0.1", self.port, "GET", "/ready",
                                      timeout=self.timeout)[0]
            except OSError:
                status = None
            self.probes.append(Probe(start, time.monotonic(), status))
            self._stopping.wait(max(0.0, start + self.every - time.monotonic()))

    def worst(self, since: float = 0.0, until: float = float("inf")) -> float:
        """The longest a probe started in [since, until) took (its client timeout when it
        got no answer)."""
        return max((p.end - p.start for p in self.probes if since <= p.start < until),
                   default=0.0)


UNKNOWN = "may have been created"


def tally(attempts: list[Attempt], stored: set[int], since: float = 0.0,
          until: float = float("inf")) -> dict:
    """The figures of the attempts that started in [since, until), against the ids the
    (new) primary holds: 503s; acknowledged creates lost (200, absent); 503s that said
    "not created" of creates that are there; answers other than 200 or 503 (None: no
    answer in time); the longest an attempt took."""
    chosen = [a for a in attempts if since <= a.start < until]
    return {
        "attempts": len(chosen),
        "503": sum(a.status == 503 for a in chosen),
        "lost": sorted(a.id for a in chosen if a.status == 200 and a.id not in stored),
        "wrong_503": sorted(a.id for a in chosen if a.status == 503 and a.id in stored
                            and UNKNOWN not in a.message),
        "other": collections.Counter(a.status for a in chosen if a.status not in (200, 503)),
        "longest": max((a.end - a.start for a in chosen), default=0.0),
    }
