"""Several processes and instances on one PostgreSQL database, over real HTTP: instances of
``plant-store serve`` behind the nginx example, gunicorn workers, an instance killed with
-9 under load, the database stopped and started under load, webhooks sent once by three
instances and taken over when one dies mid-delivery."""

import collections
import http.client
import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from plant_store.tokens import TokenFile
from support.proxies import NGINX, Nginx
from support.receiver import SECRET, Receiver, Stalling, verified
from support.servers import Server, ended, free_port, http_request, listing, wait_answering


@pytest.fixture
def shared(tmp_path, database_url):
    """What instances share: the database and a token file."""
    token_file = tmp_path / "tokens.json"
    token = TokenFile(str(token_file)).add("instances")
    return database_url, str(token_file), token


def instance(tmp_path, shared, name, *args):
    database_url, token_file, _ = shared
    return Server(tmp_path / name, "--store", "postgresql", "--database-url", database_url,
                  "--token-file", token_file, "--database-timeout", "1", *args)


def in_threads(count, work):
    results, threads = [None] * count, []
    barrier = threading.Barrier(count)

    def run(n):
        barrier.wait()
        results[n] = work(n)

    for n in range(count):
        threads.append(threading.Thread(target=run, args=(n,)))
        threads[-1].start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a client never got an answer"
    return results


@pytest.mark.slow
@pytest.mark.skipif(NGINX is None, reason="nginx is not installed")
def test_three_instances_behind_nginx_one_winner_per_id_and_none_lost(tmp_path, shared):
    _, _, token = shared
    servers = [instance(tmp_path, shared, f"i{n}", "--url-prefix", "/api",
                        "--trusted-proxy", "127.0.0.1") for n in range(3)]
    (tmp_path / "nginx").mkdir()
    nginx = Nginx(tmp_path / "nginx", *(s.port for s in servers))
    try:
        def race(n):  # 16 clients, each its own name, one id, spread over the instances
            return nginx.request("POST", "/api/plants", {"id": 1, "name": f"client {n}"}, token)

        answers = in_threads(16, race)
        assert {status for status, _, _ in answers} <= {200, 409}
        winners = {body["name"] for status, _, body in answers if status == 200}
        assert len(winners) == 1, winners  # every 200 carries the one stored plant
        assert all(body["error"] == 409 for status, _, body in answers if status == 409)

        def many(n):
            return [nginx.request("POST", "/api/plants", {"id": 1000 * (n + 1) + i,
                                                         "name": f"p{n}-{i}"}, token)[0]
                    for i in range(25)]

        assert {status for statuses in in_threads(8, many) for status in statuses} == {200}
        stored = listing(nginx.request, token, "/api")
        assert len(stored) == 1 + 8 * 25
        assert stored[0]["name"] in winners
        for server in servers:  # every instance serves the same data set
            assert listing(server.request, token) == stored
    finally:
        nginx.stop()
        for server in servers:
            server.stop()


@pytest.mark.slow
def test_kill_9_of_one_instance_under_load_loses_no_acknowledged_create(tmp_path, shared):
    _, _, token = shared
    servers = [instance(tmp_path, shared, f"i{n}") for n in range(2)]
    acknowledged, stop = collections.deque(), threading.Event()

    def load(n):
        i = 0
        while not stop.is_set():
            i += 1
            plant = {"id": n * 10**6 + i, "name": f"p{n}-{i}"}
            server = servers[i % 2]
            try:
                if server.request("POST", "/plants", plant, token, timeout=5)[0] == 200:
                    acknowledged.append(plant)
            except (OSError, http.client.HTTPException):  # killed mid-answer: IncompleteRead
                pass  # the killed instance: not acknowledged
        return i

    workers = [threading.Thread(target=load, args=(n,)) for n in range(6)]
    for worker in workers:
        worker.start()
    time.sleep(1.5)
    servers[0].proc.send_signal(signal.SIGKILL)
    time.sleep(1.5)
    stop.set()
    for worker in workers:
        worker.join(timeout=30)
    servers[0].stop()
    try:
        stored = {p["name"] for p in listing(servers[1].request, token)}
        assert len(acknowledged) > 50
        assert [p for p in acknowledged if p["name"] not in stored] == []
    finally:
        servers[1].stop()


@pytest.mark.slow
def test_the_database_stopped_under_load_is_503_then_recovers(tmp_path, shared, postgres):
    _, _, token = shared
    server = instance(tmp_path, shared, "i0", "--statement-timeout", "1")
    try:
        assert server.request("POST", "/plants", {"id": 1, "name": "before"}, token)[0] == 200
        postgres.stop()
        try:
            started = time.monotonic()
            status, _, body = server.request("POST", "/plants", {"id": 2, "name": "x"}, token)
            assert status == 503 and body["error"] == 503
            assert time.monotonic() - started < 5
            status, _, body = server.request("GET", "/ready", timeout=10)
            assert status == 503 and "not reachable" in body["message"]
            assert server.request("GET", "/health")[0] == 200
        finally:
            postgres.start()
        deadline = time.monotonic() + 15
        while server.request("POST", "/plants", {"id": 3, "name": "after"}, token)[0] != 200:
            assert time.monotonic() < deadline, "the service never recovered"
            time.sleep(0.2)
        assert server.request("GET", "/ready")[0] == 200
        names = [p["name"] for p in listing(server.request, token)]
        assert names == ["before", "after"]
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("preload", [False, True], ids=["workers", "preload"])
def test_gunicorn_workers_share_one_data_set(tmp_path, shared, preload):
    database_url, token_file, token = shared
    port = free_port()
    env = {"PLANT_STORE_STORE": "postgresql", "PLANT_STORE_DATABASE_URL": database_url,
           "PLANT_STORE_TOKEN_FILE": token_file, "PLANT_STORE_DATA_DIR": str(tmp_path / "d"),
           "PLANT_STORE_LOG_LEVEL": "warning"}
    gunicorn = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-w", "4", "-b", f"127.0.0.1:{port}",
         *(["--preload"] if preload else []), "plant_store.wsgi:application"],
        env={**__import__("os").environ, **env}, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    try:
        wait_answering(port, gunicorn, "/ready")

        def race(n):
            return http_request("127.0.0.1", port, "POST", "/plants",
                                {"id": 7, "name": f"worker race {n}"}, token)

        answers = in_threads(12, race)
        assert len({body["name"] for status, _, body in answers if status == 200}) == 1
        assert {status for status, _, _ in answers} <= {200, 409}

        def many(n):
            return [http_request("127.0.0.1", port, "POST", "/plants",
                                 {"id": 100 * (n + 1) + i, "name": f"g{n}-{i}"}, token)[0]
                    for i in range(20)]

        assert {status for statuses in in_threads(6, many) for status in statuses} == {200}
        status, _, plants = http_request("127.0.0.1", port, "GET", "/plants?limit=1000",
                                         token=token)
        assert status == 200 and len(plants) == 1 + 6 * 20
    finally:
        gunicorn.send_signal(signal.SIGTERM)
        ended(gunicorn)
        gunicorn.stderr.close()


def delivery_ids(receiver):
    return [headers["webhook-id"] for headers, _ in receiver.delivered()]


@pytest.mark.slow
def test_three_instances_send_each_delivery_once(tmp_path, shared):
    _, _, token = shared
    with Receiver() as receiver:
        hooks = ("--webhook-urls", receiver.url, "--webhook-secret", SECRET)
        servers = [instance(tmp_path, shared, f"i{n}", *hooks) for n in range(3)]
        try:
            for i in range(30):
                status, _, _ = servers[i % 3].request("POST", "/plants",
                                                      {"id": i, "name": f"p{i}"}, token)
                assert status == 200
            receiver.wait_for(30)
            time.sleep(1.5)  # time for any instance that would send one twice
            sent = delivery_ids(receiver)
            assert len(sent) == len(set(sent)) == 30
            assert sorted(json.loads(body)["id"] for _, body in receiver.delivered()) == list(
                range(30))
            assert all(verified(headers, body) for headers, body in receiver.delivered())
        finally:
            for server in servers:
                server.stop()


@pytest.mark.slow
def test_a_delivery_whose_instance_dies_mid_send_is_taken_over(tmp_path, shared):
    _, _, token = shared
    with Stalling() as stalling:
        first = instance(tmp_path, shared, "i0", "--webhook-urls", stalling.url,
                         "--webhook-secret", SECRET, "--webhook-timeout", "1")
        assert first.request("POST", "/plants", {"id": 1, "name": "a"}, token)[0] == 200
        deadline = time.monotonic() + 10
        while stalling.arrivals == 0:  # the first instance holds the delivery's claim
            assert time.monotonic() < deadline
            time.sleep(0.05)
        first.proc.send_signal(signal.SIGKILL)
        first.stop()
    port = int(stalling.url.split(":")[2].split("/")[0])
    # The subscriber is back on its port (a delivery keeps its URL); another instance,
    # once the dead one's lease has run out, takes the delivery over.
    with Receiver(port=port) as receiver:
        second = instance(tmp_path, shared, "i1", "--webhook-urls", receiver.url,
                          "--webhook-secret", SECRET, "--webhook-timeout", "1")
        try:
            [(headers, body)] = receiver.wait_for(1, timeout=20)
            assert json.loads(body) == {"id": 1, "name": "a"} and verified(headers, body)
        finally:
            second.stop()
