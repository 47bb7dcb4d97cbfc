"""Pre-fork servers never let two processes write one data directory.

gunicorn and uWSGI run as real processes on ``plant_store.wsgi:application``; clients over
fresh connections spread across their workers. One worker owns the store; the others answer
503 naming it, so no plant is acknowledged that another process could contradict.
"""

import collections
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time

import falcon
import falcon.testing
import pytest

from plant_store.config import Config
from plant_store.http.request_id import RequestId
from plant_store.service import Service
from plant_store.serving.lazy_app import UNAVAILABLE
from plant_store.stores import JsonFileStore, open_store
from plant_store.stores.lock import StoreLocked
from plant_store.stores.records import Plant
from support.prefork import APP, BIN, WsgiServer, gunicorn, uwsgi
from support.receiver import SECRET, Receiver, verified
from support.servers import StoreHolder, free_port


def assert_holds_exactly(data_dir, acknowledged):
    """The stopped server's store opens (no "created twice") and holds what was acked."""
    with JsonFileStore(str(data_dir), lock_timeout=5) as store:  # workers may still exit
        assert {plant_id: store.get(plant_id) for plant_id in acknowledged} == acknowledged
        assert len(store) == len(acknowledged)


def assert_one_owner(server, workers=4, threads=8, each=10, ids=(1, 2, 3, 4, 5)):
    """Threads create different plants under the same ids: at most one acked per id, the
    others refused (409 by the owner, 503 naming it by each other worker)."""
    acked = collections.defaultdict(set)
    answers = []

    def client(n, rounds):
        for i in range(rounds * each, (rounds + 1) * each):
            plant_id = ids[i % len(ids)]
            try:
                status, headers, body = server.request(
                    "POST", "/plants", {"id": plant_id, "name": f"client {n} try {i}"})
            except OSError as exc:
                status, headers, body = None, {}, repr(exc)
            answers.append((status, headers.get("Content-Type"), body))
            if status == 200:
                acked[plant_id].add(body["name"])

    # Rounds until one has run with every other worker up and refusing (workers that import
    # the app after the fork take a while to start).
    deadline, rounds, all_up = time.monotonic() + 30, 0, False
    while not all_up and time.monotonic() < deadline:
        all_up = _refusals(server) >= workers - 1
        clients = [threading.Thread(target=client, args=(n, rounds)) for n in range(threads)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(60)
        rounds += 1
    owner = server.owner()
    assert collections.Counter(a[0] for a in answers).keys() <= {200, 409, 503}, answers
    assert all(len(names) == 1 for names in acked.values()), dict(acked)
    unavailable = [a for a in answers if a[0] == 503]
    assert acked and unavailable, collections.Counter(a[0] for a in answers)
    for _, content_type, body in unavailable:
        assert content_type == "application/json"
        assert body == {"error": 503, "message": UNAVAILABLE}  # no path, no PID
    assert server.proc.poll() is None, "".join(server.output)
    refusals = [line for line in server.output if "answers 503 until it can open" in line]
    assert len(refusals) == workers - 1, "".join(server.output)  # not one per request
    assert all(f"{server.data_dir} is in use by another plant-store process (PID {owner})"
               in line for line in refusals), refusals  # the log says who holds what
    server.stop()
    assert_holds_exactly(server.data_dir, {
        plant_id: Plant(plant_id, names.pop()) for plant_id, names in acked.items()})


def _refusals(server):
    return "".join(server.output).count("answers 503 until it can open the store")


@pytest.mark.slow
@pytest.mark.parametrize("preload", [["--preload"], []], ids=["preload", "no-preload"])
def test_gunicorn_workers_never_share_the_store(tmp_path, preload):
    with gunicorn(tmp_path, *preload, "-w", "4", env={"PLANT_STORE_LOCK_TIMEOUT": "1"}) as server:
        assert_one_owner(server)


@pytest.mark.parametrize(("store", "says"), [
    ("jsonfile", "the JSON-file store serves one process: the other workers would answer 503"),
    ("memory", "the memory store keeps its plants in its process: each worker would have "
               "plants of its own"),
])
def test_gunicorn_refuses_several_workers_on_a_store_that_serves_one(tmp_path, store, says):
    result = subprocess.run(
        [os.path.join(BIN, "gunicorn"), "-c", "python:plant_store.gunicorn_hooks", "-w", "4",
         "-b", f"127.0.0.1:{free_port()}", APP], capture_output=True, text=True, timeout=30,
        env={**os.environ, "PLANT_STORE_STORE": store, "PLANT_STORE_DATA_DIR": str(tmp_path),
             "PLANT_STORE_PORT": "not read by the hook"})
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if "plant-store" in line] == [
        f"plant-store: error: store={store} with 4 gunicorn worker processes: {says}; use -w "
        "1 with --threads, or store = postgresql"]
    assert "Booting worker" not in result.stderr and not os.listdir(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("mode", [
    ["--master", "--processes", "4"],
    ["--processes", "4"],
    ["--master", "--processes", "4", "--lazy-apps"],
], ids=["master", "no-master", "lazy-apps"])
def test_uwsgi_workers_never_share_the_store(tmp_path, mode):
    with uwsgi(tmp_path, *mode) as server:
        assert_one_owner(server)
    said = [line.split(" ", 2)[2] for line in server.output
            if "4 uWSGI worker processes" in line]  # once, in the service's log format
    assert said == ["ERROR [plant_store.lazy_app] store=jsonfile with 4 uWSGI worker "
                    "processes: the JSON-file store serves one process: the other workers "
                    "would answer 503; use --processes 1 with --threads, or store = "
                    "postgresql\n"]


@pytest.mark.slow
def test_uwsgi_from_wheels_reloads_its_workers_as_documented(tmp_path):
    """pyuwsgi cannot re-execute itself (a HUP stops it): docs/processes.rst reloads the
    workers by touching a file instead; the store is handed over and nothing is lost."""
    reload = tmp_path / "reload"
    reload.touch()
    with uwsgi(tmp_path, "--master", "--processes", "1", "--threads", "4", "--lazy-apps",
               "--touch-workers-reload", str(reload)) as server:
        assert server.create(1, "before")[0] == 200
        time.sleep(1.1)  # uWSGI looks at the file's time once a second
        reload.touch()
        deadline = time.monotonic() + 20
        while "Respawned uWSGI worker" not in "".join(server.output):
            assert time.monotonic() < deadline, "".join(server.output)
            time.sleep(0.1)
        assert server.create(2, "after")[0] == 200
        status, _, body = server.request("GET", "/plants")
    assert status == 200 and body == [{"name": "before"}, {"name": "after"}]


def test_gunicorn_preload_delivers_webhooks_from_the_worker(tmp_path):
    with Receiver() as receiver, gunicorn(tmp_path, "--preload", "-w", "1", env={
        "PLANT_STORE_WEBHOOK_URLS": receiver.url, "PLANT_STORE_WEBHOOK_SECRET": SECRET,
    }) as server:
        assert server.request("POST", "/plants", {"id": 7, "name": "Fern"})[0] == 200
        [(headers, body)] = receiver.wait_for(1, timeout=10)
        assert json.loads(body) == {"id": 7, "name": "Fern"} and verified(headers, body)


def _listed(server):
    status, _, body = server.request("GET", "/plants?limit=1000")
    assert status == 200, body
    return body


@pytest.mark.slow
@pytest.mark.parametrize("preload", [[], ["--preload"]], ids=["no-preload", "preload"])
def test_gunicorn_reload_with_a_request_in_flight(tmp_path, preload):
    with gunicorn(tmp_path, *preload, "-w", "1") as server:
        acknowledged = {}
        for plant_id in range(1, 6):
            assert server.create(plant_id, "before")[0] == 200
            acknowledged[plant_id] = Plant(plant_id, "before")
        old_owner = server.owner()
        # A create whose body is half sent: the old worker is inside the app, store open.
        body = json.dumps({"id": 50, "name": "in flight"}).encode()
        in_flight = socket.create_connection(("127.0.0.1", server.port), timeout=20)
        in_flight.sendall(
            b"POST /plants HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + server.token.encode() + b"\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body[:5])
        time.sleep(0.5)
        server.proc.send_signal(signal.SIGHUP)
        answers = {}
        during = threading.Thread(target=lambda: answers.update(
            (i, server.create(i, "during")[0]) for i in range(100, 110)))
        during.start()
        time.sleep(1.5)  # the new worker boots and waits for the lock
        in_flight.sendall(body[5:])
        response = b""
        while chunk := in_flight.recv(65536):
            response += chunk
        in_flight.close()
        assert response.startswith(b"HTTP/1.1 200 "), response
        acknowledged[50] = Plant(50, "in flight")
        during.join(40)
        assert answers == {i: 200 for i in range(100, 110)}, "".join(server.output)
        acknowledged.update((i, Plant(i, "during")) for i in range(100, 110))
        assert server.proc.poll() is None, "".join(server.output)
        assert _listed(server) == [  # the new worker serves what the old one acknowledged
            {"name": plant.name} for plant in sorted(acknowledged.values())]
        assert server.owner() != old_owner  # and holds the lock itself
    assert_holds_exactly(tmp_path / "data", acknowledged)


def test_gunicorn_max_requests_recycles_workers_without_losing_plants(tmp_path):
    with gunicorn(tmp_path, "--preload", "-w", "1", "--max-requests", "20") as server:
        request_ids = []
        for plant_id in range(1, 101):
            status, headers, body = server.create(plant_id, f"plant {plant_id}")
            assert status == 200, (plant_id, body, "".join(server.output))
            request_ids.append(headers["X-Request-ID"])
        assert _listed(server) == [{"name": f"plant {i}"} for i in range(1, 101)]
        assert server.proc.poll() is None, "".join(server.output)
        assert len(set(request_ids)) == 100  # five workers, each with ids of its own
        assert len({i.rsplit("-", 1)[0] for i in request_ids}) >= 5
    assert_holds_exactly(tmp_path / "data",
                         {i: Plant(i, f"plant {i}") for i in range(1, 101)})


# Python 3.12+ warns about fork() in a process with threads; forking one is the point here.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_makes_request_ids_of_its_own():
    ids = RequestId()

    def make(count):
        return [ids.assign(falcon.Request(falcon.testing.create_environ()), falcon.Response())
                for _ in range(count)]

    make(1)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, json.dumps(make(3)).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        child = json.load(pipe)
    parent = make(3)
    assert not set(child) & set(parent), (child, parent)
    assert child[0].rsplit("-", 1)[0] != parent[0].rsplit("-", 1)[0]


@pytest.mark.parametrize("store", ["jsonfile", "memory"])
def test_a_second_store_waits_for_the_first_to_let_go_and_says_so_at_once(tmp_path, store,
                                                                           caplog):
    config = Config(store=store, data_dir=str(tmp_path), lock_timeout=5)
    holder = StoreHolder(tmp_path, store)
    closer = threading.Timer(0.5, holder.release)
    started = time.time()
    closer.start()
    with caplog.at_level(logging.WARNING, "plant_store.stores.lock"), open_store(config):
        elapsed = time.time() - started
    closer.join()
    assert 0.4 < elapsed < 4
    [said] = caplog.records
    assert said.getMessage() == (
        f"{tmp_path} is in use by another plant-store process (PID {holder.pid}); waiting up "
        "to 5 s (lock_timeout) for it to let go")
    assert said.created - started < 0.3  # at the start of the wait, not its end


@pytest.mark.parametrize("store", ["jsonfile", "memory"])
def test_a_second_store_refuses_after_lock_timeout(tmp_path, store):
    config = Config(store=store, data_dir=str(tmp_path), lock_timeout=0.5)
    with StoreHolder(tmp_path, store) as holder:
        for timeout, low, high in [(None, 0.4, 3), (0, 0, 0.3)]:
            started = time.monotonic()
            with pytest.raises(StoreLocked, match=rf"\(PID {holder.pid}\)"):
                open_store(config, lock_timeout=timeout)
            assert low <= time.monotonic() - started < high
    open_store(config).close()  # released on close


@pytest.mark.parametrize("store", ["jsonfile", "memory"])
def test_a_second_store_in_the_same_process_is_refused_at_once(tmp_path, store):
    config = Config(store=store, data_dir=str(tmp_path / "data"), lock_timeout=5)
    says = (f"this process already has {tmp_path / 'data'} open: one store per data "
            "directory per process; close it first, or share it (create_app(config, "
            "store=...))")
    with open_store(config):
        for second in (lambda: open_store(config), lambda: Service(config)):
            started = time.monotonic()
            with pytest.raises(StoreLocked) as refused:
                second()
            assert time.monotonic() - started < 0.5 and str(refused.value) == says
    with open_store(config):  # closed, it is free again, in this process too
        pass


NOISY = """import logging, os, sys
from plant_store.wsgi import application
for n in range(50):  # a host module that logs as it is imported, through our handler
    logging.getLogger("noisy").warning("line %d", n)
with open(os.environ["HANDLER_SEEN"], "a") as seen:
    seen.write(type(logging.getLogger().handlers[0].stream).__name__ + "\\n")
"""


@pytest.mark.slow
@pytest.mark.parametrize("lazy", [[], ["--lazy-apps"]], ids=["forked", "lazy-apps"])
def test_uwsgi_workers_forked_while_the_app_logs_all_serve(tmp_path, lazy):
    """The hostile pass on issue 52's third round: uWSGI forks its workers from C without
    taking the GIL, and the log queue's writer thread, started at import in the master,
    held it at some forks: those workers waited for it forever (31 to 51 of 80), and a
    stop waited a minute for them. The process uWSGI forks from starts no thread; with
    --lazy-apps each worker imports the app itself and queues its lines."""
    (tmp_path / "noisy.py").write_text(NOISY)
    seen = tmp_path / "seen"
    server = WsgiServer([os.path.join(BIN, "uwsgi"), "--http-socket", "127.0.0.1:{port}",
                         "--pythonpath", str(tmp_path), "--module", "noisy:application",
                         "--disable-logging", "--master", "--processes", "4", *lazy],
                        tmp_path / "data", {"PLANT_STORE_LOCK_TIMEOUT": "1",
                                            "HANDLER_SEEN": str(seen)}, signal.SIGINT)
    with server:
        time.sleep(1)  # every worker forked, or hung
        started = time.monotonic()
    stopped_in = time.monotonic() - started
    assert stopped_in < 10, "".join(server.output)
    assert seen.read_text().split() == (["LineQueue"] * 4 if lazy else ["TextIOWrapper"])
