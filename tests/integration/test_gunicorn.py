"""gunicorn with ``-c python:plant_store.gunicorn_hooks``, as docs/processes.rst runs it: its
stock ``gthread`` worker, the probes on ``probe_port`` (started in ``post_worker_init``),
recycling by ``--max-requests`` without a dropped connection. The suite runs the oldest
gunicorn the hooks support; .ci/run runs this file again on the newest release."""

import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import gunicorn as gunicorn_package
import psycopg
import pytest

from plant_store.tokens import TokenFile
from support.prefork import WsgiServer
from support.servers import exchange, free_port, http_request

GUNICORN = os.path.join(os.path.dirname(sys.executable), "gunicorn")
HOOKS = ("-c", "python:plant_store.gunicorn_hooks")


def hooked(tmp_path, *args, env=None, app="plant_store.wsgi:application"):
    """gunicorn with the hooks and a probe port; the server, and the probe port."""
    probes = free_port()
    server = WsgiServer([GUNICORN, "-b", "127.0.0.1:{port}", *HOOKS, *args, app],
                        tmp_path / "data", {"PLANT_STORE_PROBE_PORT": str(probes), **(env or {})})
    return server, probes


def timed_probe(port, path):
    started = time.monotonic()
    status = http_request("127.0.0.1", port, "GET", path, timeout=5)[0]
    return status, time.monotonic() - started


@pytest.mark.slow
def test_recycling_under_max_requests_boots_a_worker_per_five_requests(tmp_path):
    """The issue's reproducer: 194 workers booted and 194 tracebacks for 45 requests on
    gunicorn 24+, with the worker class that subclassed gunicorn 23's internals."""
    server, probes = hooked(tmp_path, "-w", "1", "--threads", "4", "--max-requests", "5")
    with server:
        creates = [server.create(n, f"plant {n}")[0] for n in range(30)]
        answers = [timed_probe(probes, path) for path in ("/health", "/ready", "/health") * 5]
        time.sleep(0.5)  # the last recycle's new worker boots
    output = "".join(server.output)
    assert creates == [200] * 30, output
    assert [status for status, _ in answers] == [200] * 15, (answers, output)
    assert "Traceback" not in output, output
    booted = output.count("Booting worker")
    assert 6 <= booted <= 7, (booted, output)  # one at start, one per 5 requests


@pytest.mark.slow
def test_no_connection_is_dropped_while_workers_recycle(tmp_path, database_url):
    """Keep-alive clients through many recycles (two workers, PostgreSQL so both serve):
    a fresh connection never fails, and probes stay fast on the probe port."""
    server, probes = hooked(tmp_path, "-w", "2", "--threads", "4", "--max-requests", "10",
                            "--keep-alive", "5", env={"PLANT_STORE_STORE": "postgresql",
                                                      "PLANT_STORE_DATABASE_URL": database_url})
    failures, took = [], []
    stop = threading.Event()

    def client():
        import http.client
        conn, fresh = None, True
        while not stop.is_set():
            try:  # keep-alive connections, as proxies hold them
                if conn is None:
                    conn, fresh = http.client.HTTPConnection("127.0.0.1", server.port,
                                                             timeout=10), True
                conn.request("GET", "/openapi.json")
                response = conn.getresponse()
                response.read()
                fresh = False
                if response.status != 200:
                    failures.append(response.status)
                if response.getheader("Connection") == "close":
                    conn.close()
                    conn = None
            except (ConnectionError, http.client.HTTPException) as exc:
                conn.close()
                conn = None
                if fresh:  # a reused idle connection may be closed (HTTP allows it,
                    failures.append(exc)  # clients send again); a new one must not
        if conn is not None:
            conn.close()

    with server:
        clients = [threading.Thread(target=client) for _ in range(3)]
        for thread in clients:
            thread.start()
        try:
            for _ in range(40):  # several recycles meanwhile
                status, seconds = timed_probe(probes, "/health")
                assert status == 200
                took.append(seconds)
                time.sleep(0.05)
        finally:
            stop.set()
            for thread in clients:
                thread.join(15)
    output = "".join(server.output)
    assert output.count("Booting worker") >= 4, output  # it did recycle
    assert "Traceback" not in output, output
    assert not failures, failures
    assert max(took) < 1.0, took


@pytest.mark.slow
def test_probes_answer_while_every_request_thread_waits_on_a_table_lock(tmp_path, database_url):
    """-w 2 --threads 2 on PostgreSQL, 8 creates stuck behind a table lock: /health and
    /ready answer within a second each on the probe port."""
    server, probes = hooked(tmp_path, "-w", "2", "--threads", "2", "--timeout", "60",
                            env={"PLANT_STORE_STORE": "postgresql",
                                 "PLANT_STORE_DATABASE_URL": database_url,
                                 "PLANT_STORE_DATABASE_TIMEOUT": "10"})
    with server:
        assert server.create(0, "first")[0] == 200  # the schema is made
        with psycopg.connect(database_url) as holder:
            holder.execute("LOCK TABLE plant_store_plants IN ACCESS EXCLUSIVE MODE")
            stuck = [threading.Thread(target=server.request, args=(
                "POST", "/plants", {"id": n, "name": "stuck"}), kwargs={"timeout": 30})
                for n in range(1, 9)]
            for thread in stuck:
                thread.start()
            time.sleep(1)  # every request thread of both workers waits
            answers = {path: timed_probe(probes, path) for path in ("/health", "/ready")}
            busy = socket.create_connection(("127.0.0.1", server.port))
            busy.close()
            holder.rollback()
        for thread in stuck:
            thread.join(30)
    assert answers["/health"][0] == 200, answers
    assert all(seconds < 1.0 for _, seconds in answers.values()), answers
    assert answers["/ready"][0] in (200, 503), answers


@pytest.mark.slow
def test_probes_answer_while_their_port_is_flooded_and_odd_requests_get_the_error_shape(
        tmp_path):
    """Hostile pass: 32 idle connections, or slow senders, shut the probe port (each one a
    thread for good), and every odd request logged a traceback or got an HTML page."""
    from plant_store.serving import probes as probe_port

    server, probes = hooked(tmp_path, "-w", "1", "--threads", "2")
    with server:
        idle = [socket.create_connection(("127.0.0.1", probes)) for _ in range(64)]
        slow = [socket.create_connection(("127.0.0.1", probes)) for _ in range(8)]
        try:
            for conn in slow:
                conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # and never the rest
            for path in ("/health", "/ready"):
                status, seconds = timed_probe(probes, path)
                assert status == 200 and seconds < 1.0, (path, status, seconds)
            time.sleep(probe_port.TIMEOUT + 1.5)
            for conn in slow:  # let go after TIMEOUT, not held for good
                conn.settimeout(1)
                assert conn.recv(1) == b""
        finally:
            for conn in [*idle, *slow]:
                conn.close()
        for head in (b"\x16\x03\x01\x00\x05hello\r\n\r\n", b"GET /health HTTP/9.9\r\n\r\n",
                     b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n"):
            answer = exchange("127.0.0.1", probes, head)
            assert answer.headers["content-type"] == "application/json", answer.raw[:200]
        assert http_request("127.0.0.1", probes, "GET", "/plants")[0] == 404
    assert "Traceback" not in "".join(server.output)


def test_a_worker_that_ends_is_never_held_by_the_probe_port(tmp_path, database_url):
    """Hostile pass: with two workers on the master's probe socket, both woke for a probe,
    one took it and the other blocked in accept(); stopping it waited for the next probe,
    or graceful_timeout (25 s), then gunicorn killed it."""
    server, probes = hooked(tmp_path, "-w", "2", "--graceful-timeout", "25",
                            env={"PLANT_STORE_STORE": "postgresql",
                                 "PLANT_STORE_DATABASE_URL": database_url})
    with server:
        for _ in range(5):
            assert timed_probe(probes, "/health")[0] == 200
        time.sleep(0.3)
        started = time.monotonic()
        server.stop()
        took = time.monotonic() - started
    assert took < 5, (took, "".join(server.output))
    assert "WORKER TIMEOUT" not in "".join(server.output)


def test_the_documented_command_counts_metrics_without_a_directory_named(tmp_path):
    """Hostile pass: the hooks imported prometheus_client before naming its directory, so
    the workers counted in memory of their own and /metrics showed no request at all."""
    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ  # as a reader's shell has it
    probes = free_port()
    server = WsgiServer([GUNICORN, "-b", "127.0.0.1:{port}", *HOOKS, "-w", "1",
                         "plant_store.wsgi:application"], tmp_path / "data",
                        {"PLANT_STORE_PROBE_PORT": str(probes)})
    with server:
        for n in range(5):
            assert server.create(n, "counted")[0] == 200
        status, _, body = server.request("GET", "/metrics")
    assert status == 200
    counted = [line for line in body.decode().splitlines()
               if line.startswith('plant_store_http_requests_total{') and 'method="POST"' in line]
    assert counted and float(counted[0].rsplit(" ", 1)[1]) == 5.0, body.decode()[:2000]


def test_the_probe_port_listens_where_gunicorn_binds_and_never_on_its_port(tmp_path):
    """Hostile pass: with -b 0.0.0.0 the probe port listened on the host setting
    (127.0.0.1), so an orchestrator on the pod's address was refused; and a probe_port
    equal to gunicorn's own ended in twelve lines about gunicorn's bind."""
    probes = free_port()
    server = WsgiServer([GUNICORN, "-b", "0.0.0.0:{port}", *HOOKS, "-w", "1",
                         "plant_store.wsgi:application"], tmp_path / "data",
                        {"PLANT_STORE_PROBE_PORT": str(probes)})
    with server:
        assert http_request("127.0.0.2", probes, "GET", "/health")[0] == 200
        port = server.port
    refused = subprocess.run(
        [GUNICORN, "-b", f"127.0.0.1:{port}", *HOOKS, "plant_store.wsgi:application"],
        env={**os.environ, "PLANT_STORE_PROBE_PORT": str(port),
             "PLANT_STORE_DATA_DIR": str(tmp_path / "data")},
        capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0
    assert (f"plant-store: error: probe_port={port} is a port gunicorn binds (-b); give the "
            f"probes a port of their own") in refused.stderr
    assert "Address already in use" not in refused.stderr


@pytest.mark.slow
def test_a_recycling_worker_is_not_held_by_a_client_that_never_sends(tmp_path):
    """A connection that never sends a request holds a recycling worker no longer than
    graceful_timeout: else no worker would take new requests."""
    server, _ = hooked(tmp_path, "-w", "1", "--max-requests", "3", "--graceful-timeout", "2")
    with server, socket.create_connection(("127.0.0.1", server.port)):  # never sends
        time.sleep(0.2)  # accepted by the worker, which waits for its request
        started = time.monotonic()
        for _ in range(5):  # past --max-requests: the worker recycles meanwhile
            assert server.request("GET", "/health", timeout=20)[0] == 200
        assert time.monotonic() - started < 2 + 10  # graceful_timeout, a new worker's start


@pytest.mark.slow
def test_the_hooks_open_no_control_socket(tmp_path):
    """gunicorn 25.1+ opens one under $HOME by default; the systemd unit's ProtectHome
    makes that an ERROR at every start. A HOME that cannot be written shows it."""
    home = tmp_path / "home"
    home.mkdir(mode=0o500)
    server, _ = hooked(tmp_path, "-w", "1", env={"HOME": str(home), "XDG_RUNTIME_DIR": ""})
    with server:
        assert server.request("GET", "/health")[0] == 200
    output = "".join(server.output)
    assert "ERROR" not in output and "control" not in output.lower(), output
    assert not os.listdir(home)


def test_a_gunicorn_older_than_the_hooks_support_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # else the import names one
    from plant_store import gunicorn_hooks

    monkeypatch.setattr(gunicorn_package, "version_info", (23, 0, 0))
    monkeypatch.setattr(gunicorn_package, "__version__", "23.0.0")
    with pytest.raises(SystemExit, match=r"needs gunicorn 27\.0 or newer \(this is 23\.0\.0\)"):
        gunicorn_hooks.on_starting(None)


@pytest.mark.slow
def test_a_worker_added_later_on_a_store_that_serves_one_is_refused(tmp_path):
    """Hostile pass: kill -TTIN added a second worker on the JSON-file store, which
    answered 503 to most creates while /ready flapped."""
    server, _ = hooked(tmp_path, "-w", "1")
    with server:
        server.proc.send_signal(signal.SIGTTIN)
        time.sleep(2)
        assert [server.create(n, "one")[0] for n in range(6)] == [200] * 6
    output = "".join(server.output)
    assert output.count("Booting worker") == 1, output
    assert "the worker count stays 1" in output, output


@pytest.mark.slow
def test_a_recycled_worker_does_not_repeat_the_start_warning(tmp_path):
    """Issue 46: with --max-requests, every recycled worker logged the same "deliveries
    owed to a URL webhook_urls does not list" warning (62 lines in 15 s); it is said once
    per server start."""
    import base64

    from support.servers import Server

    secret = "whsec_" + base64.b64encode(b"k" * 32).decode()
    first = Server(tmp_path / "data", "--webhook-urls", "http://127.0.0.1:9/",
                   "--webhook-backoff", "3600", env={"PLANT_STORE_WEBHOOK_SECRET": secret})
    assert first.request("POST", "/plants", {"id": 1, "name": "owed"},
                         token=first.first_token)[0] == 200
    first.stop()
    server, _ = hooked(tmp_path, "-w", "1", "--threads", "4", "--max-requests", "5")
    with server:
        creates = [server.create(n, f"plant {n}")[0] for n in range(2, 32)]
        time.sleep(0.5)
    output = "".join(server.output)
    assert creates == [200] * 30, output
    assert output.count("Booting worker") >= 6, output
    assert output.count("which webhook_urls does not list") == 1, output


ACCESS_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO \[plant_store\.access\] "
                         r"127\.0\.0\.1 (POST /plants 200|GET /nope 404) \d+\.\dms [\w-]+")


@pytest.mark.slow
def test_two_workers_sharing_a_stalled_stderr_tear_no_access_line(tmp_path, database_url):
    """The hostile pass on issue 52's third round: under gunicorn with two workers, each
    worker's access flush went to the shared stderr in one write, and where a slow reader
    came back those writes were cut into each other's lines. The WSGI entry point writes
    through the log queue (whole lines, at most PIPE_BUF a write), as plant-store serve."""
    port = free_port()
    token = TokenFile(str(tmp_path / "tokens.json")).add("t")
    proc = subprocess.Popen(
        [GUNICORN, "-b", f"127.0.0.1:{port}", *HOOKS, "-w", "2", "--threads", "8",
         "plant_store.wsgi:application"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "PLANT_STORE_DATA_DIR": str(tmp_path), "PLANT_STORE_STORE":
             "postgresql", "PLANT_STORE_DATABASE_URL": database_url,
             "PLANT_STORE_LOG_LEVEL": "info"})
    received, done = [], threading.Event()

    def stalling_reader():  # a log shipper slower than the lines: 4 KiB each 40 ms
        while not done.is_set() or select.select([proc.stderr], [], [], 0)[0]:
            if select.select([proc.stderr], [], [], 0.05)[0]:
                chunk = os.read(proc.stderr.fileno(), 4096)
                if not chunk:
                    return
                received.append(chunk)
                if not done.is_set():
                    time.sleep(0.04)

    reader = threading.Thread(target=stalling_reader)
    reader.start()
    answers = []
    try:
        deadline = time.monotonic() + 20
        while http_get_status(port) is None:
            assert time.monotonic() < deadline and proc.poll() is None, "gunicorn did not start"
            time.sleep(0.1)

        def client(n):
            for i in range(300):
                plant = n * 1000 + i
                answers.append(http_request("127.0.0.1", port, "POST", "/plants",
                                            {"id": plant, "name": f"p{plant}"}, token)[0])
                answers.append(http_request("127.0.0.1", port, "GET", "/nope", None,
                                            token)[0])

        clients = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(120)
        time.sleep(0.3)  # the last flush
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
        done.set()
        reader.join(20)
        proc.stderr.close()
    assert sorted(set(answers)) == [200, 404] and len(answers) == 4800
    lines = b"".join(received).decode(errors="replace").splitlines()
    access = [line for line in lines if "plant_store.access" in line]
    torn = [line for line in access if not ACCESS_LINE.fullmatch(line)]
    assert not torn and len(access) == 4800, (len(access), torn[:3])


def http_get_status(port):
    try:
        return http_request("127.0.0.1", port, "GET", "/health", timeout=2)[0]
    except OSError:
        return None
