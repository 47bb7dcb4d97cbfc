"""/health and /ready answer at once while every request thread waits, under every server
the docs offer: waitress queues requests for its threads, gunicorn's threaded worker too,
and a probe must not wait its turn (plant_store.probe_lane, plant_store.gunicorn_probes)."""

import os
import signal
import sys
import threading
import time

import pytest

from plant_store.gunicorn_probes import is_probe
from serverproc import Server
from test_prefork import WsgiServer

STUCK_STORE = """
import time
from plant_store.stores.jsonfile import JsonFileStore
create = JsonFileStore.create
def stuck_create(self, plant, webhooks=()):
    time.sleep(2)  # as a create waiting on a locked table, up to database_timeout
    return create(self, plant, webhooks)
JsonFileStore.create = stuck_create
"""


def timed(request, path):
    started = time.monotonic()
    status = request("GET", path, timeout=10)[0]
    return status, time.monotonic() - started


def probes_while_stuck(request, token, prefix=""):
    """6 creates on 2 request threads (2 served, 4 queued), then probes; their answers."""
    creates = [threading.Thread(target=request, args=(
        "POST", f"{prefix}/plants", {"id": n, "name": "Fern"}), kwargs={"token": token,
                                                                         "timeout": 30})
        for n in range(6)]
    for create in creates:
        create.start()
    time.sleep(0.5)
    answers = [timed(request, prefix + path) for path in ("/health", "/ready") * 3]
    for create in creates:
        create.join(30)
    return answers


def test_under_serve(tmp_path):
    with Server(tmp_path, "--threads", "2", "--url-prefix", "/api",
                prelude=STUCK_STORE) as server:
        answers = probes_while_stuck(server.request, server.first_token, "/api")
    assert all(status == 200 for status, _ in answers), answers
    assert max(took for _, took in answers) < 1.0, answers


def test_under_gunicorn(tmp_path):
    (tmp_path / "stuck_app.py").write_text(
        STUCK_STORE + "from plant_store.wsgi import application  # noqa: E402,F401\n")
    gunicorn = os.path.join(os.path.dirname(sys.executable), "gunicorn")
    server = WsgiServer([gunicorn, "-b", "127.0.0.1:{port}", "-c",
                         "python:plant_store.gunicorn_hooks", "--threads", "2",
                         "--pythonpath", str(tmp_path), "stuck_app:application"],
                        tmp_path / "data")
    with server:
        def request(method, path, body=None, token=None, timeout=10):
            from serverproc import http_request
            return http_request("127.0.0.1", server.port, method, path, body, token,
                                timeout=timeout)
        answers = probes_while_stuck(request, server.token)
    assert all(status == 200 for status, _ in answers), answers
    assert max(took for _, took in answers) < 1.0, answers


def test_under_uwsgi_on_probe_port(tmp_path):
    """uWSGI's threads accept connections themselves, so none takes a probe on the
    service's port while all wait; probe_port gives each worker a listener of its own."""
    from serverproc import free_port, http_request

    (tmp_path / "stuck_app.py").write_text(
        STUCK_STORE + "from plant_store.wsgi import application  # noqa: E402,F401\n")
    probes = free_port()
    uwsgi = os.path.join(os.path.dirname(sys.executable), "uwsgi")
    server = WsgiServer([uwsgi, "--http-socket", "127.0.0.1:{port}", "--master",
                         "--processes", "1", "--threads", "2", "--pythonpath", str(tmp_path),
                         "--module", "stuck_app:application", "--disable-logging"],
                        tmp_path / "data", {"PLANT_STORE_PROBE_PORT": str(probes)},
                        signal.SIGINT)

    def request(method, path, body=None, token=None, timeout=10):
        port = probes if path in ("/health", "/ready", "/plants?probe-port") else server.port
        return http_request("127.0.0.1", port, method, path.split("?")[0], body, token,
                            timeout=timeout)

    with server:
        answers = probes_while_stuck(request, server.token)
        status, _, body = request("GET", "/plants?probe-port", token=server.token)
    assert all(status == 200 for status, _ in answers), answers
    assert max(took for _, took in answers) < 1.0, answers
    assert status == 404 and body["error"] == 404  # the probe port answers probes only


@pytest.mark.parametrize(("head", "probe"), [
    (b"GET /health HTTP/1.1\r\n\r\n", True), (b"HEAD /ready?x=1 HTTP/1.1\r\nHost: x\r\n\r\n", True),
    (b"GET /api/ready HTTP/1.1\r\n\r\n", True), (b"POST /health HTTP/1.1\r\n\r\n", False),
    (b"GET /plants HTTP/1.1\r\n\r\n", False), (b"GET /healthy HTTP/1.1\r\n\r\n", False),
    (b"", False), (b"\x16\x03\x01\x02\x00", False),
    # Not whole yet, or with a body: a probe thread must never wait for the client.
    (b"GET /health HTTP/1.1\r\nHost: x\r\n", False), (b"GE", False),
    (b"GET /health HTTP/1.1\r\nContent-Length: 5\r\n\r\n", False),
    (b"GET /ready HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", False)])
def test_a_probe_is_told_from_its_first_bytes(head, probe):
    assert is_probe(head) is probe


def test_a_recycling_gunicorn_worker_is_not_held_by_a_client_that_never_sends(tmp_path):
    """The probe lane's worker serves what it accepted before it recycles (gunicorn's own
    threaded worker reset those connections), but a connection that never sends a request
    holds it no longer than graceful_timeout: else no worker would take new requests."""
    import socket

    from serverproc import http_request

    gunicorn = os.path.join(os.path.dirname(sys.executable), "gunicorn")
    server = WsgiServer([gunicorn, "-b", "127.0.0.1:{port}", "-c",
                         "python:plant_store.gunicorn_hooks", "-w", "1", "--max-requests",
                         "3", "--graceful-timeout", "2", "plant_store.wsgi:application"],
                        tmp_path / "data")
    with server, socket.create_connection(("127.0.0.1", server.port)):  # never sends
        time.sleep(0.2)  # accepted by the worker, which waits for its request
        started = time.monotonic()
        for _ in range(5):  # past --max-requests: the worker recycles meanwhile
            assert http_request("127.0.0.1", server.port, "GET", "/health",
                                timeout=20)[0] == 200
        assert time.monotonic() - started < 2 + 10  # graceful_timeout, a new worker's start
        # (without the bound, the old worker waits for the silent client, and no worker
        # takes the fourth request: it times out)


def gunicorn_server(tmp_path, *args):
    gunicorn = os.path.join(os.path.dirname(sys.executable), "gunicorn")
    return WsgiServer([gunicorn, "-b", "127.0.0.1:{port}", "-c",
                       "python:plant_store.gunicorn_hooks", *args,
                       "plant_store.wsgi:application"], tmp_path / "data")


def test_clients_that_send_a_probe_slowly_cannot_hold_the_probe_threads(tmp_path):
    """Found by the hostile pass: two connections that sent a probe's request line and
    never ended its headers held both probe threads, and every probe timed out."""
    import socket

    from serverproc import http_request

    with gunicorn_server(tmp_path, "-w", "1", "--threads", "2") as server:
        slow = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]
        try:
            for conn in slow:
                conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            time.sleep(0.3)
            for path in ("/health", "/ready"):
                started = time.monotonic()
                assert http_request("127.0.0.1", server.port, "GET", path,
                                    timeout=5)[0] == 200
                assert time.monotonic() - started < 1.0
        finally:
            for conn in slow:
                conn.close()


def test_recycling_gunicorn_workers_drop_no_connection_and_keep_probes_fast(tmp_path):
    """Found by the hostile pass: each recycle left probes unanswered for 2.1 s (idle
    keep-alive connections held the draining worker), and some connections were reset
    (gunicorn's own count stopped the loop under the other threads)."""
    from serverproc import http_request

    # Two workers, so that one serves while the other is replaced (with one, a recycle
    # leaves a gap of the new worker's start, as with gunicorn's own workers). Without the
    # hooks, which refuse two workers on the JSON-file store, but with their worker class.
    gunicorn = os.path.join(os.path.dirname(sys.executable), "gunicorn")
    with WsgiServer([gunicorn, "-b", "127.0.0.1:{port}", "-k",
                     "plant_store.gunicorn_probes.ProbeLaneWorker", "-w", "2", "--threads", "4",
                     "--max-requests", "10", "--keep-alive", "5",
                     "plant_store.wsgi:application"], tmp_path / "data") as server:
        failures, probes = [], []
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

        clients = [threading.Thread(target=client) for _ in range(3)]
        for thread in clients:
            thread.start()
        try:
            for _ in range(40):  # several recycles meanwhile
                started = time.monotonic()
                assert http_request("127.0.0.1", server.port, "GET", "/health",
                                    timeout=10)[0] == 200
                probes.append(time.monotonic() - started)
                time.sleep(0.05)
        finally:
            stop.set()
            for thread in clients:
                thread.join(15)
    assert max(probes) < 1.0, probes
    assert not failures, failures


def test_waitress_queue_warning_is_throttled(caplog):
    """waitress warns for every task queued behind busy threads: under load nearly every
    request, written by its I/O thread. One line per interval, counting the rest."""
    from plant_store.probe_lane import ProbeLaneDispatcher

    release, served = threading.Event(), []

    class Task:
        def __init__(self, n):
            self.n = n

        def service(self):
            release.wait(5)
            served.append(self.n)

        def cancel(self):
            pass

    dispatcher = ProbeLaneDispatcher(1)
    try:
        with caplog.at_level("WARNING", logger="waitress.queue"):
            for n in range(50):
                dispatcher.add_task(Task(n))
            release.set()
            deadline = time.monotonic() + 5
            while len(served) < 50 and time.monotonic() < deadline:
                time.sleep(0.01)
        lines = [r.getMessage() for r in caplog.records if r.name == "waitress.queue"]
        assert len(served) == 50
        assert len(lines) == 1 and lines[0].startswith("Task queue depth is "), lines
    finally:
        dispatcher.shutdown()
