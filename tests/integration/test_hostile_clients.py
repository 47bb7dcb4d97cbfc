"""No client, with a token or without, may crash or starve ``plant-store serve`` (hostile
rounds 4 and 5, issues 34 and 42): each test is an attack found over real HTTP, against a
real server."""

import contextlib
import os
import socket
import threading
import time

import pytest

from support.servers import Server, exchange, free_port, http_request

BUNDLE = "/docs/swagger-ui-bundle.js"  # the biggest public answer (1.4 MB)
MANY_DESCRIPTORS = """
import os
held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # as 1,100 connections would
"""
LOOP_FAILS = """
import waitress.wasyncore
def poll(*args, **kwargs):
    raise ValueError("filedescriptor out of range in select()")
waitress.wasyncore.poll2 = poll
waitress.wasyncore.poll = poll
"""


def descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def creates_within(server, token, seconds, first_id=0):
    """How many creates one client makes, one after another, in ``seconds``."""
    until, n = time.monotonic() + seconds, 0
    while time.monotonic() < until:
        assert server.request("POST", "/plants", {"id": first_id + n, "name": "legit"}, token,
                              timeout=15)[0] == 200
        n += 1
    return n


def pipeline_and_never_read(server, path, connections, requests, token=None):
    """Connections that send ``requests`` pipelined GETs of ``path`` and read nothing."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    head = f"GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode()
    socks = []
    for _ in range(connections):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((server.host, server.port))
        sock.sendall(head * requests)
        socks.append(sock)
    return socks


def test_descriptors_past_1023_do_not_end_the_server(tmp_path):
    """waitress's select() loop raised 'filedescriptor out of range' once a connection's
    descriptor passed 1023, and plant-store serve exited 1."""
    with Server(tmp_path, prelude=MANY_DESCRIPTORS) as server:
        for _ in range(3):
            assert server.request("GET", "/health")[0] == 200
        assert server.proc.poll() is None


def test_a_failing_io_loop_is_said_and_ends_the_server_with_status_1(tmp_path):
    server = Server(tmp_path, prelude=LOOP_FAILS, wait=False)
    try:
        server.proc.wait(15)
    finally:
        status = server.stop()
    log = "".join(server.stderr)
    assert status == 1, log
    assert "waitress's I/O loop failed; stopping" in log and "Traceback" in log
    assert "plant-store: error: the server's I/O loop failed" in log


@pytest.mark.slow
@pytest.mark.parametrize("with_token", [False, True])
def test_clients_that_pipeline_and_never_read_pin_no_thread(tmp_path, with_token):
    """16 connections (as many as threads) pipelining GETs of big answers and reading
    nothing held every request thread (creates 4,500/s -> 0) and spilled hundreds of MB."""
    with Server(tmp_path, "--threads", "4", "--request-timeout", "3") as server:
        token = server.first_token
        for n in range(300):  # pages of 300 plants with long names, for the token's attack
            assert server.request("POST", "/plants", {"id": 10_000 + n, "name": "x" * 900},
                                  token)[0] == 200
        path = "/plants?limit=300" if with_token else BUNDLE
        before = descriptors(server.proc.pid)
        attack = pipeline_and_never_read(server, path, 8, 40, token if with_token else None)
        try:
            time.sleep(1)
            assert creates_within(server, token, 1.5) >= 20  # one client, one at a time
            status, seconds = timed(server.port, "/ready")
            assert status == 200 and seconds < 1
            time.sleep(3 + 2)  # request_timeout, and the upkeep's second
            leaked = [sock for sock in attack if not _closed(sock)]
            assert not leaked, f"{len(leaked)} connections that never read still open"
            assert descriptors(server.proc.pid) <= before + 2
        finally:
            for sock in attack:
                sock.close()


def _closed(sock, timeout=2):
    """Whether the server closed ``sock`` (what it sent before, unread, is read and
    dropped), within ``timeout`` of the last byte."""
    sock.settimeout(timeout)
    try:
        while sock.recv(1 << 20):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


@pytest.mark.slow
def test_a_client_that_never_reads_a_big_answer_is_closed(tmp_path):
    """Hostile pass on these fixes: a 4 MB page asked for and never read stayed open for
    good (the close was only marked, and waitress acts on the mark once the socket is
    writable, which it never was): 38 of them took every connection."""
    with Server(tmp_path, "--request-timeout", "2") as server:
        token = server.first_token
        for n in range(1000):
            assert server.request("POST", "/plants", {"id": n, "name": "x" * 4000},
                                  token)[0] == 200
        before = descriptors(server.proc.pid)
        stalled = pipeline_and_never_read(server, "/plants?limit=1000", 3, 1, token)
        try:
            time.sleep(2 + 2.5)  # request_timeout, and the upkeep's second
            # Counted before reading anything: a client that reads would unstall it.
            assert descriptors(server.proc.pid) <= before + 2
            assert all(_closed(sock, timeout=1) for sock in stalled)
        finally:
            for sock in stalled:
                sock.close()


def timed(port, path, host="127.0.0.1"):
    started = time.monotonic()
    status = http_request(host, port, "GET", path, timeout=5)[0]
    return status, time.monotonic() - started


@pytest.mark.slow
def test_idle_and_slow_connections_cannot_hoard_the_limit(tmp_path):
    """~98 idle, slow-header or slow-body connections at connection_limit 100 took creates
    and probes down, and a sender of one byte every 10 s stayed connected for good."""
    probes = free_port()
    with Server(tmp_path, "--connection-limit", "30", "--request-timeout", "3",
                "--probe-port", str(probes)) as server:
        token = server.first_token
        hoard = []
        for n in range(40):  # more than the limit: idle, slow headers, slow bodies
            sock = socket.create_connection((server.host, server.port), timeout=5)
            if n % 3 == 1:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            elif n % 3 == 2:
                sock.sendall(b"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            hoard.append(sock)
        try:
            status, seconds = timed(probes, "/ready")  # the probe port: never crowded out
            assert status == 200 and seconds < 1
            started = time.monotonic()
            assert server.request("POST", "/plants", {"id": 1, "name": "in"}, token,
                                  timeout=10)[0] == 200
            assert time.monotonic() - started < 3  # the longest idle were let go for it
            dribbler = socket.create_connection((server.host, server.port), timeout=10)
            started = time.monotonic()
            for byte in b"GET /health HTTP/1.1\r\nHost: x\r\n":  # a byte every 0.5 s
                try:
                    dribbler.sendall(bytes([byte]))
                except OSError:
                    break
                time.sleep(0.5)
            assert _closed(dribbler)
            dribbler.close()
            assert time.monotonic() - started < 3 + 3  # request_timeout, and the upkeep
        finally:
            for sock in hoard:
                sock.close()


def test_transfer_encoding_with_content_length_closes_after_the_answer(tmp_path):
    """RFC 9112 6.1: a server MUST close such a connection after answering (request
    smuggling behind a front end that prefers Content-Length)."""
    with Server(tmp_path) as server:
        token = server.first_token
        body = b'{"id": 5, "name": "Fern"}'
        head = (b"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                b"Content-Type: application/json\r\nContent-Length: 4\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" % token.encode())
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        answer = exchange(server.host, server.port, head + chunked)
        assert answer.status == 200
        assert answer.headers.get("connection") == "close"
        with socket.create_connection((server.host, server.port), timeout=5) as sock:
            sock.sendall(head + chunked + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
        assert received.count(b"HTTP/1.1 ") == 1  # the smuggled request is never answered


@pytest.mark.parametrize("size", [65_524, 65_536])
def test_a_chunked_body_is_held_to_the_limit_by_its_bytes_not_its_framing(tmp_path, size):
    """A 65,524-65,536-byte chunked body got 413; the same body by Content-Length, 200."""
    with Server(tmp_path) as server:
        token = server.first_token
        prefix = b'{"id": 7, "name": "'
        body = prefix + b"x" * (size - len(prefix) - 2) + b'"}'
        assert len(body) == size
        by_length = server.request("POST", "/plants", body, token, timeout=10)[0]
        head = (b"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                % token.encode())
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part)
                          for part in (body[i:i + 1000] for i in range(0, size, 1000)))
        answer = exchange(server.host, server.port, head + chunks + b"0\r\n\r\n")
        assert answer.status == by_length != 413
        over = prefix + b"x" * (65_537 - len(prefix) - 2) + b'"}'
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part)
                          for part in (over[i:i + 1000] for i in range(0, len(over), 1000)))
        answer = exchange(server.host, server.port, head + chunks + b"0\r\n\r\n")
        assert answer.status == 413
        assert "65536" in answer.body["message"]


@pytest.mark.slow
def test_no_body_is_invited_before_the_token_is_checked(tmp_path):
    """'Expect: 100-continue' with a wrong token still got '100 Continue', an invitation
    to send up to 64 KB."""
    with Server(tmp_path) as server:
        token = server.first_token

        def first_bytes(bearer):
            with socket.create_connection((server.host, server.port), timeout=5) as sock:
                sock.sendall(b"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                             b"Content-Type: application/json\r\nContent-Length: 30\r\n"
                             b"Expect: 100-continue\r\n\r\n" % bearer.encode())
                sock.settimeout(1.5)
                try:
                    return sock.recv(100)
                except TimeoutError:
                    return b""

        assert first_bytes(token).startswith(b"HTTP/1.1 100 Continue")
        assert not first_bytes("wrong-token").startswith(b"HTTP/1.1 100")


@pytest.mark.slow
def test_a_client_over_its_rate_limit_is_not_read_until_its_retry_after(tmp_path):
    """A client that ignores 429 and sends again at once costs a request per Retry-After,
    not a request per answer: its connection is not read until then, and one that
    pipelined past the 429 is closed."""
    with Server(tmp_path, "--rate-limit", "1", "--rate-limit-burst", "0") as server:
        token = server.first_token
        head = f"GET /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
        with socket.create_connection((server.host, server.port), timeout=10) as sock:
            reader = sock.makefile("rb")

            def answer():
                status = int(reader.readline().split()[1])
                length = 0
                while (line := reader.readline()) != b"\r\n":
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                reader.read(length)
                return status, time.monotonic()

            sock.sendall(head.encode())
            assert answer()[0] == 200
            sock.sendall(head.encode())
            status, refused_at = answer()
            assert status == 429
            sock.sendall(head.encode())  # at once, ignoring Retry-After: 1
            status, answered_at = answer()
            assert answered_at - refused_at >= 0.8  # not read before Retry-After
            reader.close()
        time.sleep(1.1)
        with socket.create_connection((server.host, server.port), timeout=10) as sock:
            sock.sendall(head.encode() * 20)  # pipelined past the limit
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
        assert received.count(b"HTTP/1.1 429") == 1 and received.count(b"HTTP/1.1 ") == 2


class SlowReaders:
    """``count`` connections, each pipelining ``requests`` GETs of the bundle and reading
    ``read`` bytes every ``every`` seconds, from one thread, until ``stop()``; with
    ``reconnect``, a connection the server closes is opened again at once, as an attacker
    would. ``closed`` counts the connections the server closed."""

    def __init__(self, server, count, read, every, requests=20, reconnect=False):
        self._address, self._read, self._every = (server.host, server.port), read, every
        self._head = f"GET {BUNDLE} HTTP/1.1\r\nHost: x\r\n\r\n".encode() * requests
        self._reconnect, self._stopping = reconnect, threading.Event()
        self.closed = 0
        self.socks = [self._open() for _ in range(count)]
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _open(self):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(5)
        sock.connect(self._address)
        sock.sendall(self._head)
        sock.setblocking(False)
        return sock

    def _run(self):
        while not self._stopping.wait(self._every):
            for n, sock in enumerate(self.socks):
                if sock is None:
                    continue
                try:
                    gone = not sock.recv(self._read)
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    self.closed += 1
                    sock.close()
                    self.socks[n] = None
                    if self._reconnect:
                        with contextlib.suppress(OSError):
                            self.socks[n] = self._open()

    def open(self):
        return sum(sock is not None for sock in self.socks)

    def stop(self):
        self._stopping.set()
        self._thread.join(10)
        for sock in self.socks:
            if sock is not None:
                sock.close()


# min_send_rate at its default, judged over 2 s rather than 20 (a test's patience).
SLOW_READER_ENV = {"PLANT_STORE_MIN_SEND_RATE": "4096", "PLANT_STORE_SEND_RATE_WINDOW": "2"}


@pytest.mark.slow
def test_slow_readers_at_the_limit_let_new_clients_in(tmp_path):
    """Issue 42, finding 1: 98 connections pipelining the 1.4 MB bundle and reading 6 KB
    every 5 s held every connection (the answer kept moving, so request_timeout never
    fired, and the eviction at the limit spared connections with an answer unsent): 0 of
    5-10 honest creates got through in 45-100 s. Here at a limit of 30, every slot taken
    by a reader at 2 KB/s that reconnects as soon as it is closed: honest creates get
    in, and min_send_rate closes every reader within a window or two (issue 49, finding
    9: with min_send_rate off the creates still got in, through the eviction at the
    limit, which frees one slot a second, so the test did not show min_send_rate act)."""
    with Server(tmp_path, "--connection-limit", "30", env=SLOW_READER_ENV) as server:
        token = server.first_token
        readers = SlowReaders(server, 30, read=2048, every=1, reconnect=True)
        try:
            time.sleep(2)
            started, made = time.monotonic(), 0
            while time.monotonic() - started < 8 and made < 4:
                status = server.request("POST", "/plants", {"id": made, "name": "in"}, token,
                                        timeout=5)[0]
                assert status == 200
                made += 1
            assert made == 4, f"{made} creates in 8 s"
            deadline = time.monotonic() + 6  # two windows of 2 s, the upkeep, a margin
            while readers.closed < 30 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert readers.closed >= 30, (f"{readers.closed} of 30 readers at 2 KB/s closed "
                                          "in 6 s: min_send_rate did not act")
        finally:
            readers.stop()


@pytest.mark.slow
def test_an_answer_that_moves_below_the_minimum_rate_is_closed(tmp_path):
    """Issue 42: an answer taken at 2 KB/s kept its connection for as long as the client
    liked; under ``min_send_rate`` (bytes a second, over ``send_rate_window`` seconds the
    answer waits on the client) it is closed, and a client reading faster is not."""
    env = {"PLANT_STORE_MIN_SEND_RATE": "8192", "PLANT_STORE_SEND_RATE_WINDOW": "2"}
    with Server(tmp_path, env=env) as server:
        slow = SlowReaders(server, 3, read=1024, every=0.5)
        fast = SlowReaders(server, 1, read=65536, every=0.5)
        try:
            deadline = time.monotonic() + 8  # two windows, the upkeep's second, a margin
            while slow.open() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert slow.closed == 3, f"{slow.open()} readers at 2 KB/s still open"
            assert fast.closed == 0
        finally:
            slow.stop()
            fast.stop()


@pytest.mark.slow
def test_the_probe_port_is_not_ready_while_every_connection_is_held(tmp_path):
    """Issue 42: /ready on the probe port said ready while no new client could get in.
    28 connections sending a request a byte every 0.3 s hold a limit of 30 (each is
    neither idle nor late before request_timeout)."""
    probes = free_port()
    with Server(tmp_path, "--connection-limit", "30", "--probe-port", str(probes)) as server:
        assert timed(probes, "/ready")[0] == 200
        holders = [socket.create_connection((server.host, server.port), timeout=5)
                   for _ in range(28)]
        stopping = threading.Event()

        def dribble():
            while not stopping.wait(0.3):
                for sock in holders:
                    with contextlib.suppress(OSError):
                        sock.sendall(b"X")

        dribbler = threading.Thread(target=dribble)
        dribbler.start()
        try:
            deadline = time.monotonic() + 4
            while (answer := http_request("127.0.0.1", probes, "GET", "/ready", timeout=2)
                   )[0] == 200 and time.monotonic() < deadline:
                time.sleep(0.2)
            status, headers, body = answer
            assert status == 503
            assert headers["Content-Type"] == "application/json"
            assert body["error"] == 503 and "connection_limit=30" in body["message"]
        finally:
            stopping.set()
            dribbler.join(5)
            for sock in holders:
                sock.close()
        deadline = time.monotonic() + 4
        while timed(probes, "/ready")[0] != 200:
            assert time.monotonic() < deadline, "still not ready with every holder gone"
            time.sleep(0.2)


def test_a_wrong_token_with_expect_100_continue_is_refused_at_once(tmp_path):
    """Issue 42, item 7: 'Expect: 100-continue' with a wrong token got no 100, and no
    answer either until the body came; RFC 9110 10.1.1: the headers decide it, so the
    final status goes at once (and the connection is closed: the body is never read)."""
    with Server(tmp_path) as server:
        head = (b"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"
                b"Content-Type: application/json\r\nContent-Length: 30\r\n"
                b"Expect: 100-continue\r\n\r\n")
        started = time.monotonic()
        answer = exchange(server.host, server.port, head, timeout=2)
        assert time.monotonic() - started < 1
        assert answer.status == 401, answer.raw
        assert not answer.raw.startswith(b"HTTP/1.1 100")
        assert answer.body == {"error": 401, "message": "The bearer token is not valid."}
        assert answer.headers["www-authenticate"].startswith("Bearer")
        assert answer.headers.get("connection") == "close"
