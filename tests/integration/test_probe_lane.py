"""/health and /ready answer at once while every request thread waits, under every server
the docs offer: waitress queues requests for its threads, uWSGI's threads take connections
themselves, and a probe must not wait its turn (plant_store.serving.probes;
gunicorn's in test_gunicorn.py)."""

import os
import signal
import sys
import threading
import time

import pytest

from support.prefork import WsgiServer
from support.servers import Server

STUCK_STORE = """
import time
from plant_store.stores.jsonfile.store import JsonFileStore
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


@pytest.mark.slow
def test_under_serve(tmp_path):
    with Server(tmp_path, "--threads", "2", "--url-prefix", "/api",
                prelude=STUCK_STORE) as server:
        answers = probes_while_stuck(server.request, server.first_token, "/api")
    assert all(status == 200 for status, _ in answers), answers
    assert max(took for _, took in answers) < 1.0, answers


@pytest.mark.slow
def test_under_uwsgi_on_probe_port(tmp_path):
    """uWSGI's threads accept connections themselves, so none takes a probe on the
    service's port while all wait; probe_port gives each worker a listener of its own."""
    from support.servers import free_port, http_request

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


@pytest.mark.parametrize("pool", ["requests", "probe lane", "probe port"])
def test_waitress_queue_warning_is_throttled(caplog, pool):
    """waitress warns for every task queued behind busy threads: under load nearly every
    request, written by its I/O thread. One line per interval, counting the rest, in every
    pool of ours (the probe lane's and the probe port's made a line per poll of /ready: the
    hostile pass on issue 52)."""
    from plant_store.serving.probes import ProbeLaneDispatcher
    from plant_store.serving.waitress_loop import throttled_dispatcher

    release, served = threading.Event(), []
    path = "/ready" if pool == "probe lane" else "/plants"

    class Request:
        command = "GET"

    Request.path = path

    class Task:
        def __init__(self, n):
            self.n = n
            self.requests = [Request()]

        def service(self):
            release.wait(5)
            served.append(self.n)

        def cancel(self):
            pass

    dispatcher = throttled_dispatcher(1) if pool == "probe port" else ProbeLaneDispatcher(1)
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
