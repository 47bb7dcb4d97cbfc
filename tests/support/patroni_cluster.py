"""A throwaway Patroni cluster for the topology tests: one etcd (v3 API), three Patroni nodes
running PostgreSQL in synchronous mode (strict), and HAProxy in front sending connections
to whichever node answers ``OPTIONS /primary`` on its Patroni REST API with 200.

Everything runs as a process of this one, on 127.0.0.1 and free ports, in one temporary
directory under /tmp (configs, data, logs), and is stopped by PID: SIGTERM, then SIGKILL.
Patroni starts each postmaster as a daemon of its own (not its child), so the postmasters
are found by ``postmaster.pid`` and killed, with their children, if Patroni left them.
Under root, etcd, Patroni and PostgreSQL run as the ``postgres`` user (``initdb`` and
``postgres`` refuse root); HAProxy runs as the caller.

The timing (``ttl`` 10, ``loop_wait`` 1, ``retry_timeout`` 3) makes a cluster form, and a
leader be replaced, within seconds; ``synchronous_mode_strict`` makes a primary without a
synchronous standby refuse to commit rather than acknowledge what a failover could lose.
"""

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import psycopg

from support.pgserver import SUPERUSER, _children, alive, find_bindir
from support.servers import free_port

ETCD = "/usr/bin/etcd"
PATRONI = "/usr/bin/patroni"
PATRONICTL = "/usr/bin/patronictl"
HAPROXY = "/usr/sbin/haproxy"
SCOPE = "plants"
FORM_TIMEOUT = 90.0  # seconds for a cluster to form: a leader, a synchronous standby, all up
STOP_TIMEOUT = 20.0


def missing() -> str | None:
    """What of the topology is not installed, or None when all of it is."""
    for path in (ETCD, PATRONI, PATRONICTL, HAPROXY):
        if not os.access(path, os.X_OK):
            return f"{path} is not installed"
    if find_bindir() is None:
        return "the PostgreSQL server is not installed"
    return None


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports below 32768 (above, they collide with the ephemeral ones
    the OS hands out) that nothing listens on now, from this xdist worker's own range
    (support.servers.free_port)."""
    return [free_port() for _ in range(count)]


def http_status(url: str, method: str = "GET", timeout: float = 1.0) -> tuple[int | None, bytes]:
    """(status, body) of one request; (None, b"") when nothing answered in time."""
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (OSError, ValueError):
        return None, b""


class Node:
    """One Patroni node: its REST port, its PostgreSQL port and data directory."""

    def __init__(self, name: str, base: str, pg_port: int, rest_port: int) -> None:
        self.name = name
        self.dir = os.path.join(base, name)
        self.data = os.path.join(self.dir, "data")
        self.config = os.path.join(self.dir, "patroni.yml")
        self.log = os.path.join(self.dir, "patroni.log")
        self.pg_port = pg_port
        self.rest_port = rest_port
        self.process: subprocess.Popen | None = None

    @property
    def rest(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.pg_port}/{dbname}"

    def connect(self, **kwargs) -> psycopg.Connection:
        return psycopg.connect(self.url(), connect_timeout=5, autocommit=True, **kwargs)

    def is_primary(self, timeout: float = 0.5) -> bool:
        """What HAProxy asks: does Patroni say this node is the primary (200)?"""
        return http_status(f"{self.rest}/primary", "OPTIONS", timeout)[0] == 200

    def writable(self, timeout: float = 1.0) -> bool:
        """Whether a commit on this node can complete now: its PostgreSQL accepts a
        connection, is not in recovery, and a synchronous standby streams from it (in
        synchronous mode strict, commits wait for one)."""
        try:
            with psycopg.connect(self.url(), connect_timeout=max(1, round(timeout)),
                                 autocommit=True) as conn:
                return conn.execute(
                    "SELECT NOT pg_is_in_recovery() AND EXISTS (SELECT FROM "
                    "pg_stat_replication WHERE state = 'streaming' AND sync_state = 'sync')"
                ).fetchone()[0]
        except psycopg.Error:
            return False

    @property
    def postmaster_pid(self) -> int | None:
        """The PID ``postmaster.pid`` names, if that process runs."""
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as fh:
                pid = int(fh.readline())
        except (OSError, ValueError):
            return None
        return pid if alive(pid) else None


class PatroniCluster:
    """etcd, three Patroni nodes and HAProxy, started by :meth:`start` and stopped by
    :meth:`cleanup` (which also removes the directory). ``port`` is HAProxy's: the address
    clients use."""

    def __init__(self, size: int = 3, *, ttl: int = 10, loop_wait: int = 1,
                 retry_timeout: int = 3) -> None:
        self.bindir = "/usr/lib/postgresql/15/bin"
        if not os.access(os.path.join(self.bindir, "postgres"), os.X_OK):
            self.bindir = find_bindir()
        self.base = tempfile.mkdtemp(prefix="plant-store-patroni-", dir="/tmp")
        self.timing = {"ttl": ttl, "loop_wait": loop_wait, "retry_timeout": retry_timeout}
        self._user = pwd.getpwnam(SUPERUSER) if os.geteuid() == 0 else None
        ports = free_ports(3 + 2 * size)
        self.etcd_client, self.etcd_peer, self.port = ports[:3]
        self.nodes = [Node(f"node{i}", self.base, ports[3 + 2 * i], ports[4 + 2 * i])
                      for i in range(size)]
        self.haproxy_config = os.path.join(self.base, "haproxy.cfg")
        self.haproxy_socket = os.path.join(self.base, "haproxy.sock")
        self._etcd: subprocess.Popen | None = None
        self._haproxy: subprocess.Popen | None = None
        self._own(self.base)

    # Starting ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start etcd, the nodes and HAProxy; return once a leader and a synchronous standby
        are up and HAProxy routes to the leader."""
        try:
            self._start_etcd()
            for node in self.nodes:
                self._write_patroni_config(node)
                self.start_node(node)
            self._write_haproxy_config()
            self._haproxy = self._spawn([HAPROXY, "-f", self.haproxy_config, "-db"],
                                        os.path.join(self.base, "haproxy.log"), as_user=False)
            self.wait_healthy(FORM_TIMEOUT)
        except BaseException:
            self.cleanup()
            raise

    def start_node(self, node: Node) -> None:
        node.process = self._spawn([PATRONI, node.config], node.log)

    def _start_etcd(self) -> None:
        data = os.path.join(self.base, "etcd")
        client = f"http://127.0.0.1:{self.etcd_client}"
        peer = f"http://127.0.0.1:{self.etcd_peer}"
        self._etcd = self._spawn([
            ETCD, "--name", "etcd0", "--data-dir", data,
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"etcd0={peer}", "--initial-cluster-state", "new",
            "--initial-cluster-token", os.path.basename(self.base),
            "--heartbeat-interval", "100", "--election-timeout", "1000",
        ], os.path.join(self.base, "etcd.log"))
        deadline = time.monotonic() + 30
        while http_status(f"{client}/health")[0] != 200:
            if self._etcd.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"etcd did not start:\n{self.log_tail('etcd.log')}")
            time.sleep(0.1)

    def _write_patroni_config(self, node: Node) -> None:
        os.makedirs(node.dir, mode=0o700)
        self._own(node.dir)
        hba = ["local all all trust", "host all all 127.0.0.1/32 trust",
               "host replication all 127.0.0.1/32 trust"]
        config = {
            "scope": SCOPE,
            "namespace": "/service/",
            "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": f"127.0.0.1:{node.rest_port}",
                        "connect_address": f"127.0.0.1:{node.rest_port}"},
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_client}"]},
            "bootstrap": {
                "dcs": {
                    **self.timing,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    "synchronous_mode_strict": True,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_level": "replica", "hot_standby": "on",
                            "max_wal_senders": 10, "max_replication_slots": 10,
                            "wal_log_hints": "on", "max_connections": 100,
                            "fsync": "on", "synchronous_commit": "on",
                            "wal_keep_size": "128MB",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, {"auth": "trust"}],
                "pg_hba": hba,
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.pg_port}",
                "connect_address": f"127.0.0.1:{node.pg_port}",
                "data_dir": node.data,
                "bin_dir": self.bindir,
                "pgpass": os.path.join(node.dir, "pgpass"),
                "authentication": {"superuser": {"username": SUPERUSER},
                                   "replication": {"username": SUPERUSER},
                                   "rewind": {"username": SUPERUSER}},
                "parameters": {"unix_socket_directories": node.dir},
                "pg_hba": hba,
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False,
                     "nosync": False},
        }
        with open(node.config, "w") as fh:
            json.dump(config, fh, indent=1)  # JSON is YAML
        self._own(node.config)

    def _write_haproxy_config(self) -> None:
        servers = "\n".join(
            f"    server {node.name} 127.0.0.1:{node.pg_port} maxconn 100 "
            f"check port {node.rest_port}" for node in self.nodes)
        with open(self.haproxy_config, "w") as fh:
            fh.write(f"""global
    maxconn 400
    stats socket {self.haproxy_socket} mode 600 level admin

defaults
    mode tcp
    retries 2
    timeout connect 2s
    timeout client 30m
    timeout server 30m
    timeout check 1s

listen postgres
    bind 127.0.0.1:{self.port}
    option httpchk OPTIONS /primary
    http-check expect status 200
    default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
{servers}
""")

    # Looking ----------------------------------------------------------------------------

    def members(self) -> list[dict]:
        """Patroni's view (REST ``/cluster``, asked of each node until one answers)."""
        for node in self.nodes:
            status, body = http_status(f"{node.rest}/cluster", timeout=1)
            if status == 200:
                return json.loads(body)["members"]
        return []

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def leader(self) -> Node | None:
        for member in self.members():
            if member["role"] == "leader" and member["state"] == "running":
                return self.node(member["name"])
        return None

    def sync_standby(self) -> Node | None:
        for member in self.members():
            if member["role"] == "sync_standby" and member["state"] == "running":
                return self.node(member["name"])
        return None

    def haproxy_up(self) -> list[str]:
        """The servers HAProxy routes to now (its stats socket: ``show stat``)."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(2)
            sock.connect(self.haproxy_socket)
            sock.sendall(b"show stat\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        lines = data.decode().splitlines()
        header = lines[0].lstrip("# ").split(",")
        rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]
        return [row["svname"] for row in rows
                if row["pxname"] == "postgres" and row["svname"] not in ("FRONTEND", "BACKEND")
                and row["status"].startswith("UP")]

    def healthy(self) -> bool:
        """A leader, a synchronous standby that streams from it, every node running, and
        HAProxy routing to the leader alone."""
        members = self.members()
        if len(members) != len(self.nodes) or any(m["state"] != "running" for m in members):
            return False
        leaders = [m["name"] for m in members if m["role"] == "leader"]
        if len(leaders) != 1 or not any(m["role"] == "sync_standby" for m in members):
            return False
        try:
            with self.node(leaders[0]).connect() as conn:
                streaming = conn.execute("SELECT count(*) FROM pg_stat_replication "
                                         "WHERE state = 'streaming' AND sync_state = 'sync'"
                                         ).fetchone()[0]
        except psycopg.Error:
            return False
        return streaming == 1 and self.haproxy_up() == leaders

    def wait_healthy(self, timeout: float) -> Node:
        """Wait until :meth:`healthy`; return the leader."""
        deadline = time.monotonic() + timeout
        while not self.healthy():
            for name, process in [("etcd", self._etcd), ("haproxy", self._haproxy),
                                  *[(n.name, n.process) for n in self.nodes]]:
                if process is not None and process.poll() is not None:
                    raise RuntimeError(f"{name} exited ({process.returncode}):\n"
                                       f"{self.diagnostics()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster was not healthy within {timeout:g} s:\n"
                                   f"{self.diagnostics()}")
            time.sleep(0.2)
        return self.leader()

    def patronictl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([PATRONICTL, "-c", self.nodes[0].config, *args],
                              capture_output=True, text=True, timeout=timeout)

    def log_tail(self, name: str, lines: int = 15) -> str:
        try:
            with open(os.path.join(self.base, name), errors="replace") as fh:
                return "".join(fh.readlines()[-lines:])
        except OSError:
            return ""

    def diagnostics(self) -> str:
        parts = [f"members: {self.members()}"]
        with contextlib.suppress(OSError):
            parts.append(f"haproxy routes to: {self.haproxy_up()}")
        for node in self.nodes:
            parts.append(f"--- {node.name} ---\n{self.log_tail(f'{node.name}/patroni.log')}")
        return "\n".join(parts)

    # Faults and stopping -------------------------------------------------------------------

    def kill_postmaster(self, node: Node) -> int:
        """SIGKILL ``node``'s postmaster alone (a crash; Patroni stays); return its PID."""
        pid = node.postmaster_pid
        if pid is None:
            raise RuntimeError(f"{node.name} has no running postmaster")
        os.kill(pid, signal.SIGKILL)
        return pid

    def cleanup(self) -> None:
        """Stop every process (HAProxy, the nodes, etcd) by PID and remove the directory."""
        try:
            _stop(self._haproxy)
            for node in self.nodes:
                with contextlib.suppress(ProcessLookupError):
                    if node.process and node.process.poll() is None:
                        node.process.send_signal(signal.SIGTERM)
            for node in self.nodes:
                _stop(node.process)
                self._kill_postmaster_tree(node)
            _stop(self._etcd)
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def _kill_postmaster_tree(self, node: Node) -> None:
        pid = node.postmaster_pid
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
        children = _children(pid)
        for each in [pid, *children]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(each, signal.SIGKILL)
        deadline = time.monotonic() + STOP_TIMEOUT
        while any(map(alive, [pid, *children])) and time.monotonic() < deadline:
            time.sleep(0.02)

    # Processes ----------------------------------------------------------------------------

    def _own(self, path: str) -> None:
        if self._user:
            os.chown(path, self._user.pw_uid, self._user.pw_gid)

    def _spawn(self, args: list[str], log_path: str, *, as_user: bool = True
               ) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "PATRONI"))}
        user = {}
        if as_user and self._user:
            user = {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}
            env["HOME"] = self._user.pw_dir
        with open(log_path, "ab") as log:
            process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, cwd=self.base, env=env,
                                       start_new_session=True, **user)
        self._own(log_path)
        return process


def _stop(process: subprocess.Popen | None) -> None:
    """SIGTERM ``process`` (if it still runs), wait, then SIGKILL it."""
    if process is None:
        return
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
            return
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    process.wait(STOP_TIMEOUT)
