"""The hostile pass on issue 49, over real HTTP against ``plant-store serve --server
granian``: what anonymous clients can hold (HTTP/2 streams whose answers cannot be sent,
answers never read, connections that send nothing) is bounded, and a worker's death
stops nothing. The HTTP/2 attacks use a real HTTP/2 client library (h2)."""

import os
import re
import signal
import socket
import ssl
import threading
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import pytest

from support.proxies import certificates
from support.servers import Server, closed_within, free_port, http_request, listing, wait_answering

GRANIAN = ("--server", "granian")
BUNDLE = "/docs/swagger-ui-bundle.js"  # the largest public answer (1.4 MB)


def granian(tmp_path, *args, **kwargs):
    return Server(tmp_path, *GRANIAN, *args, **kwargs)


def worker_pids(server):
    return [int(pid) for pid in re.findall(r"Spawning worker-\d+ with PID: (\d+)",
                                           "".join(server.stderr))]


def alive(pid):
    """Whether ``pid`` runs (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0]) / 1024


def health(sock):
    """GET /health on an open connection, its whole answer read: the status line."""
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data or not data.endswith(b"}"):
        chunk = sock.recv(4096)
        assert chunk, data
        data += chunk
    return data.split(b"\r\n", 1)[0]


def h2_attack(sock, streams, path):
    """A client that opens no window (0 for every stream) and asks for ``path`` on
    ``streams`` streams; what the server answered, as h2 events (none: not HTTP/2)."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    for n in range(streams):
        conn.send_headers(1 + 2 * n, [(":method", "GET"), (":path", path),
                                      (":scheme", "http"), (":authority", "x")],
                          end_stream=True)
    try:
        sock.sendall(conn.data_to_send())
    except OSError:
        return []
    sock.settimeout(3)
    events, data = [], b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
            if not data.startswith(b"HTTP/"):
                events += conn.receive_data(chunk)
    except (TimeoutError, ConnectionResetError):
        pass
    except h2.exceptions.ProtocolError:
        pass  # HTTP/1.1's answer read as HTTP/2
    assert not events or data.startswith(b"HTTP/") is False
    return events


def test_no_http2_without_tls_h2c_prior_knowledge_is_not_spoken(tmp_path):
    """Finding 1: with prior knowledge, granian spoke h2c on the plain port, and a client
    with its window at 0 held every answer of 190 streams (4.9 MB a connection for
    /openapi.json). HTTP/2 is not spoken: the preface is not HTTP/1.1, and it is closed."""
    with granian(tmp_path, "--store", "memory") as server:
        [worker] = worker_pids(server)
        before = rss_mb(worker)
        socks = [socket.create_connection((server.host, server.port)) for _ in range(10)]
        try:
            for sock in socks:
                events = h2_attack(sock, 190, "/openapi.json")
                assert not any(isinstance(event, (h2.events.RemoteSettingsChanged,
                                                  h2.events.ResponseReceived))
                               for event in events), events
            assert rss_mb(worker) - before < 20
        finally:
            for sock in socks:
                sock.close()
        assert server.request("GET", "/health")[0] == 200


def test_no_http2_over_tls_alpn_offers_http1_only(tmp_path):
    """Finding 1 over TLS: ALPN chose h2 for a client that offered it. It offers only
    http/1.1: a client that asks for h2 alone is refused, one that offers both gets 1.1."""
    pki = certificates()
    with granian(tmp_path, "--store", "memory", "--tls-certificate", str(pki.cert),
                 "--tls-key", str(pki.key)) as server:
        def handshake(offered):
            context = pki.context()
            context.set_alpn_protocols(offered)
            with socket.create_connection((server.host, server.port), timeout=5) as raw, \
                    context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                return tls.selected_alpn_protocol(), tls.recv(100)

        chosen, answer = handshake(["h2", "http/1.1"])
        assert chosen == "http/1.1" and answer.startswith(b"HTTP/1.1 200"), (chosen, answer)
        with pytest.raises(ssl.SSLError, match="no application protocol"):
            handshake(["h2"])


def test_a_connection_that_sends_nothing_is_closed_at_request_timeout(tmp_path):
    """Finding 4: hyper's header deadline starts at the first byte, so a connection that
    sent nothing was never closed. It is closed ``request_timeout`` after it was made."""
    with granian(tmp_path, "--store", "memory", "--request-timeout", "2") as server:
        silent = socket.create_connection((server.host, server.port))
        started = time.monotonic()
        assert closed_within(silent, 6)
        assert 1.5 < time.monotonic() - started < 4.5
        silent.close()


@pytest.mark.slow
def test_an_idle_keep_alive_connection_is_closed_at_channel_timeout(tmp_path):
    """``channel_timeout``, refused under granian before issue 49, is kept as on waitress:
    a connection quiet between requests for that long is closed; a busy one is not."""
    with granian(tmp_path, "--store", "memory", "--channel-timeout", "3") as server:
        idle = socket.create_connection((server.host, server.port))
        chatty = socket.create_connection((server.host, server.port))
        try:
            assert health(idle) == b"HTTP/1.1 200 OK"
            started = time.monotonic()
            while time.monotonic() - started < 5:  # a request a second: never idle for 3 s
                assert health(chatty) == b"HTTP/1.1 200 OK"
                time.sleep(1)
            assert closed_within(idle, 0.1)
        finally:
            idle.close()
            chatty.close()


@pytest.mark.slow
def test_clients_that_never_read_are_reset_and_hold_memory_within_the_limit(tmp_path):
    """Finding 3: 200 connections asking for the 1.4 MB bundle and reading nothing held
    ~1.9 MB each, bounded only by the descriptor limit. Each worker takes
    ``connection_limit`` at a time, an answer untaken for ``request_timeout`` is reset,
    and honest clients and the probes are served meanwhile."""
    pytest.importorskip("swagger_ui")
    probes, limit = free_port(), 20
    with granian(tmp_path, "--probe-port", str(probes), "--connection-limit", str(limit),
                 "--request-timeout", "3") as server:
        token = server.first_token
        [worker] = worker_pids(server)
        size = len(http_request(server.host, server.port, "GET", BUNDLE, timeout=10)[2])
        assert size > 1_000_000
        before = rss_mb(worker)
        readers = []
        for _ in range(100):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((server.host, server.port))
            sock.sendall(f"GET {BUNDLE} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            readers.append(sock)
        try:
            started, n, peak = time.monotonic(), 0, 0.0
            while time.monotonic() - started < 4:
                assert server.request("POST", "/plants", {"id": n, "name": "in"}, token,
                                      timeout=5)[0] == 200
                n += 1
                peak = max(peak, rss_mb(worker) - before)
            assert n >= 20
            assert http_request("127.0.0.1", probes, "GET", "/ready")[0] == 200
            # At most the limit's answers are held at once (and the kernel's buffers).
            assert peak < limit * size / 2**20 * 1.5 + 30, (peak, size)
            assert sum(closed_within(sock, 0.01) for sock in readers) >= 20
        finally:
            for sock in readers:
                sock.close()


@pytest.mark.slow
def test_idle_connections_at_the_limit_let_honest_clients_in_and_ready_tells_when_held(
        tmp_path):
    """Finding 4: 300 idle connections took an honest client to 0 creates/s under a
    descriptor limit of 256. At ``connection_limit`` the idle ones are let go and new
    clients get in; /ready says 503 only while every slot stays held by clients that
    cannot be let go (requests arriving: a body on its way)."""
    probes, limit = free_port(), 20
    with granian(tmp_path, "--probe-port", str(probes), "--connection-limit", str(limit),
                 "--threads", "2") as server:
        token = server.first_token
        idle = [socket.create_connection((server.host, server.port)) for _ in range(300)]
        try:
            time.sleep(0.5)
            started = time.monotonic()
            assert server.request("POST", "/plants", {"id": 1, "name": "in"}, token,
                                  timeout=10)[0] == 200
            assert time.monotonic() - started < 3
            assert http_request("127.0.0.1", probes, "GET", "/ready")[0] == 200
        finally:
            for sock in idle:
                sock.close()
        held = []
        try:
            for _ in range(limit):  # a body on its way: a request running, never let go
                sock = socket.create_connection((server.host, server.port), timeout=10)
                sock.sendall((f"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                              f"{token}\r\nContent-Type: application/json\r\n"
                              "Content-Length: 30\r\n\r\n{").encode())
                held.append(sock)
            deadline = time.monotonic() + 10
            while (answer := http_request("127.0.0.1", probes, "GET", "/ready"))[0] != 503:
                assert time.monotonic() < deadline, answer
                time.sleep(0.2)
            assert "connection slot" in answer[2]["message"] or "busy" in answer[2]["message"]
        finally:
            for sock in held:
                sock.close()
        wait_answering(probes, server.proc, timeout=10)  # ready again


@pytest.mark.slow
def test_a_killed_worker_is_replaced_logged_and_counted_and_no_write_is_lost(tmp_path):
    """Finding 2: one worker's death made granian stop every worker and exit 1. It is
    replaced: the service answers again, the log says so, the metrics count it, and every
    acknowledged create is there (JSON file: the new worker replays the journal)."""
    with granian(tmp_path, "--metrics", "public") as server:
        token = server.first_token
        acknowledged, stop = [], threading.Event()

        def write():
            n = 0
            while not stop.is_set():
                try:
                    if server.request("POST", "/plants", {"id": n, "name": f"w{n}"}, token,
                                      timeout=5)[0] == 200:
                        acknowledged.append(n)
                except OSError:
                    pass
                n += 1

        writer = threading.Thread(target=write)
        writer.start()
        try:
            time.sleep(0.5)
            [first] = worker_pids(server)
            os.kill(first, signal.SIGKILL)
            deadline = time.monotonic() + 15
            while "".join(server.stderr).count("Started worker-") < 2:
                assert time.monotonic() < deadline, "".join(server.stderr)
                time.sleep(0.1)
            time.sleep(1)
        finally:
            stop.set()
            writer.join(10)
        assert server.proc.poll() is None  # still serving
        assert f"pid {first}) ended unexpectedly" in "".join(server.stderr)
        status, _, text = http_request(server.host, server.port, "GET", "/metrics")
        assert status == 200 and b"plant_store_worker_restarts 1.0" in text, text
        kept = {plant["name"] for plant in listing(server.request, token)}
        assert acknowledged and {f"w{n}" for n in acknowledged} <= kept
    assert server.proc.returncode == 0


def test_a_connection_limit_the_descriptors_cannot_hold_is_refused_in_one_line(tmp_path):
    """The hostile pass on issue 49: with 256 descriptors and connection_limit 300, a
    flood left granian's accept loop spinning on EMFILE (295,000 log lines in 30 s), the
    upkeep unable to open its copies and /ready unanswered. Refused at start instead."""
    import subprocess
    import sys

    result = subprocess.run(
        ["prlimit", "--nofile=256", sys.executable, "-m", "plant_store", "serve",
         *GRANIAN, "--port", "0", "--data-dir", str(tmp_path), "--connection-limit", "300"],
        capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert "connection_limit" in line and "may open 256" in line and "at most 192" in line


@pytest.mark.slow
def test_a_killed_master_takes_its_workers_with_it(tmp_path):
    """The hostile pass on issue 49: after a SIGKILL of granian's master its worker went
    on serving, holding the data directory, so a new start was refused. The worker gets
    SIGTERM when its master ends, stops as at a stop, and the directory is free."""
    server = granian(tmp_path)
    try:
        [worker] = worker_pids(server)
        server.proc.kill()
        deadline = time.monotonic() + 15
        while alive(worker):
            assert time.monotonic() < deadline, "the worker outlived its master"
            time.sleep(0.1)
    finally:
        if alive(worker):  # it holds the output pipes: the stop would wait on it
            os.kill(worker, signal.SIGKILL)
        server.stop()
    with granian(tmp_path) as again:  # the data directory is free
        assert again.request("GET", "/health")[0] == 200
