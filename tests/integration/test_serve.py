"""End to end: ``plant-store serve`` on waitress, over real HTTP, across restarts."""

import http.client
import json
import signal
import socket
import struct
import threading
import time

import pytest

from support.journals import records
from support.servers import Server


def test_first_start_prints_a_token_that_works_and_data_survives_restart(tmp_path):
    with Server(tmp_path) as server:
        token = server.first_token
        assert token and len(token) >= 40
        assert f"curl -i -X POST {server.url}/plants" in "".join(server.stdout)
        for i in range(20):
            status, _, body = server.request("POST", "/plants",
                                             {"id": i, "name": f"plant {i}", "tag": "t"}, token)
            assert (status, body) == (200, {"name": f"plant {i}", "tag": "t"})
        status, headers, body = server.request("POST", "/plants", {"id": 1}, token)
        assert status == 400 and body["error"] == 400 and "name" in body["message"]
    assert server.proc.returncode == 0
    assert token not in "".join(server.stderr)  # the token is never logged

    with Server(tmp_path) as server:
        status, _, body = server.request("POST", "/plants", {"id": 5, "name": "plant 5",
                                                             "tag": "t"}, token)
        assert (status, body) == (200, {"name": "plant 5", "tag": "t"})
        status, _, body = server.request("POST", "/plants", {"id": 5, "name": "other"}, token)
        assert status == 409 and body["error"] == 409
        status, headers, body = server.request("POST", "/plants", {"id": 1, "name": "x"})
        assert status == 401 and headers["WWW-Authenticate"] == 'Bearer realm="plant-store"'
    assert server.stdout == []  # a token exists, so none was made or printed
    assert len(records(tmp_path)) == 20


def test_access_log_lines_over_http(tmp_path):
    with Server(tmp_path) as server:
        server.request("POST", "/plants", {"id": 1, "name": "x"}, server.first_token)
        server.request("GET", "/missing", token=server.first_token)
    access = [line for line in server.stderr if "[plant_store.access]" in line]
    assert [line.split()[5:8] for line in access] == [
        ["POST", "/plants", "200"], ["GET", "/missing", "404"]]


def test_chunked_request_body_is_read(tmp_path):
    with Server(tmp_path) as server:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
        body = json.dumps({"id": 1, "name": "chunked"}).encode()
        conn.request("POST", "/plants", body=iter([body[:5], body[5:]]), encode_chunked=True,
                     headers={"Authorization": f"Bearer {server.first_token}",
                              "Content-Type": "application/json"})
        response = conn.getresponse()
        assert (response.status, json.loads(response.read())) == (200, {"name": "chunked"})
        conn.close()


def test_memory_store_starts_empty_each_time(tmp_path):
    with Server(tmp_path, "--store", "memory") as server:
        token = server.first_token
        assert server.request("POST", "/plants", {"id": 1, "name": "a"}, token)[0] == 200
    with Server(tmp_path, "--store", "memory") as server:
        assert server.request("POST", "/plants", {"id": 1, "name": "b"}, token)[0] == 200
    assert not (tmp_path / "plants.jsonl").exists()


SLOW_STORE = """
import sys, time
from plant_store.stores.jsonfile.store import JsonFileStore
create = JsonFileStore.create
def slow_create(self, plant, webhooks=()):  # a second in the store; ids from 100 three
    print("slow create started", file=sys.stderr, flush=True)
    time.sleep(3.0 if plant.id >= 100 else 1.0)
    return create(self, plant, webhooks)
JsonFileStore.create = slow_create
"""


# A MultiSocketServer, as a host name with two addresses (or '*') gives.
TWO_SOCKETS = """
import waitress.server
one_socket = waitress.server.create_server
def two_sockets(app, host=None, port=None, **settings):
    return one_socket(app, listen="127.0.0.1:0 127.0.0.2:0", **settings)
waitress.server.create_server = two_sockets
"""


def wait_for_line(server, text, count=1, timeout=10):
    deadline = time.monotonic() + timeout  # under load, requests may take a while to come
    while "".join(server.stderr).count(text) < count:
        assert time.monotonic() < deadline, "".join(server.stderr)
        time.sleep(0.02)


def post_raw(server, plant, token):
    """A POST on a socket of the test's own, its answer left unread."""
    sock = socket.create_connection((server.host, server.port))
    body = json.dumps(plant).encode()
    sock.sendall(b"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (token.encode(), len(body), body))
    return sock


def creates_in_flight(server, token, ids):
    """Threads creating ``ids``, and where each one's (status, body, time answered) goes."""
    answers = {}

    def create(plant_id):
        status, _, body = server.request("POST", "/plants", {"id": plant_id, "name": "Fern"},
                                         token, timeout=20)
        answers[plant_id] = (status, body, time.monotonic())
    threads = [threading.Thread(target=create, args=(plant_id,)) for plant_id in ids]
    for thread in threads:
        thread.start()
    return threads, answers


@pytest.mark.slow
@pytest.mark.parametrize("sockets", [1, 2])
def test_a_stop_sends_each_answer_in_flight_as_soon_as_it_is_ready(tmp_path, sockets):
    """The hostile pass of issue 26: with answers buffered for waitress's I/O thread, a stop
    lost every answer in flight on two listening sockets, held each answer until the
    slowest request was done, and let one client that reset its connection use up the time
    left for all the others; a second signal cut the sending short."""
    prelude = SLOW_STORE + (TWO_SOCKETS if sockets == 2 else "")
    with Server(tmp_path, prelude=prelude) as server:
        token = server.first_token
        threads, answers = creates_in_flight(server, token, (1, 2, 3, 100))
        gone = post_raw(server, {"id": 4, "name": "Gone"}, token)
        wait_for_line(server, "slow create started", count=5)
        gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        gone.close()  # a reset, while its create is in the store
        signalled = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        server.proc.send_signal(signal.SIGTERM)  # ignored: the drain is bounded already
        for thread in threads:
            thread.join(20)
        assert server.proc.wait(10) == 0
    assert {n: answer[:2] for n, answer in answers.items()} == {
        n: (200, {"name": "Fern"}) for n in (1, 2, 3, 100)}
    waited = {n: round(answer[2] - signalled, 2) for n, answer in answers.items()}
    # The quick creates are answered about a second in, not after the slow one's three.
    assert max(waited[n] for n in (1, 2, 3)) < 2.5 < waited[100], waited
    assert "".join(server.stderr).splitlines()[-1].endswith("plant-store stopped")


@pytest.mark.slow
def test_a_client_that_takes_no_answer_holds_back_no_other_at_a_stop(tmp_path):
    """A page of about 9 MB that its client never reads stays in the server's buffer; the
    other answers in flight still go out at once, and the stop ends after the grace
    (server.STOP_GRACE, 5 s)."""
    name = "n" * 60_000
    with Server(tmp_path) as server:
        token = server.first_token
        for plant_id in range(1000, 1150):
            assert server.request("POST", "/plants", {"id": plant_id, "name": name},
                                  token)[0] == 200
    with Server(tmp_path, prelude=SLOW_STORE) as server:
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.connect((server.host, server.port))
        reader.sendall(b"GET /plants?limit=1000 HTTP/1.1\r\nHost: x\r\n"
                       b"Authorization: Bearer %s\r\n\r\n" % token.encode())
        threads, answers = creates_in_flight(server, token, (1, 2))
        wait_for_line(server, "slow create started", count=2)
        wait_for_line(server, "GET /plants 200")  # its answer is buffered, in part unsent
        signalled = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(20)
        assert server.proc.wait(15) == 0
        stopped = time.monotonic() - signalled
        reader.close()
    assert {n: answer[:2] for n, answer in answers.items()} == {
        n: (200, {"name": "Fern"}) for n in (1, 2)}
    assert max(answer[2] - signalled for answer in answers.values()) < 2.5, answers
    assert 4.5 < stopped < 8, stopped


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_finishes_the_request_in_flight_then_exits_0(tmp_path, sig):
    """SIGHUP too: waitress reopens no logs, and a closed terminal or a supervisor's HUP
    killed the server at once, the request and the last access lines lost."""
    with Server(tmp_path, prelude=SLOW_STORE) as server:
        token = server.first_token
        answers = []
        in_flight = threading.Thread(target=lambda: answers.append(
            server.request("POST", "/plants", {"id": 7, "name": "Fern"}, token)))
        in_flight.start()
        wait_for_line(server, "slow create started")
        server.proc.send_signal(sig)  # while the create sleeps in the store
        in_flight.join(10)
        assert server.proc.wait(10) == 0
    assert [(status, body) for status, _, body in answers] == [(200, {"name": "Fern"})]
    lines = "".join(server.stderr).splitlines()
    assert "POST /plants 200" in lines[-2] and lines[-1].endswith("plant-store stopped")
    with Server(tmp_path) as server:  # acknowledged, so on disk
        assert server.request("POST", "/plants", {"id": 7, "name": "Other"}, token)[0] == 409


def test_sighup_ignored_as_nohup_leaves_it_keeps_serving(tmp_path):
    """``nohup plant-store serve`` must outlive its terminal, as it did."""
    with Server(tmp_path, "--store", "memory",
                prelude="import signal; signal.signal(signal.SIGHUP, signal.SIG_IGN)") as server:
        server.proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        assert server.request("GET", "/health")[0] == 200
    assert server.proc.returncode == 0


def test_json_lines_logs_with_request_ids(tmp_path):
    with Server(tmp_path, "--log-format", "json") as server:
        token = server.first_token
        _, headers, _ = server.request("POST", "/plants", {"id": 1, "name": "x"}, token,
                                       headers={"X-Request-ID": "from-proxy-1"})
        assert headers["X-Request-ID"] == "from-proxy-1"
        _, headers, _ = server.request("POST", "/plants", {"id": 2, "name": "y"}, token)
        made = headers["X-Request-ID"]
        assert made and made != "from-proxy-1"
    records = [json.loads(line) for line in server.stderr]  # every line is one JSON object
    access = [r for r in records if r["logger"] == "plant_store.access"]
    assert [(r["method"], r["path"], r["status"], r["request_id"]) for r in access] == [
        ("POST", "/plants", 200, "from-proxy-1"), ("POST", "/plants", 200, made)]
    assert all(r["remote_addr"] == "127.0.0.1" and r["duration_ms"] >= 0 and r["time"]
               for r in access)
    assert any(r["message"].startswith("plant-store listening") for r in records)


def test_access_lines_come_before_the_closing_line(tmp_path):
    with Server(tmp_path) as server:
        server.request("POST", "/plants", {"id": 1, "name": "x"}, server.first_token)
    lines = "".join(server.stderr).splitlines()
    assert "POST /plants 200" in lines[-2]
    assert lines[-1].endswith("plant-store stopped")


def test_list_and_delete_over_http_across_a_restart(tmp_path):
    with Server(tmp_path) as server:
        token = server.first_token
        for i in range(5):
            server.request("POST", "/plants", {"id": i, "name": f"p{i}"}, token)
        status, headers, body = server.request("GET", "/plants?limit=2", token=token)
        assert (status, body) == (200, [{"name": "p0"}, {"name": "p1"}])
        assert headers["Link"] == f"<{server.url}/plants?limit=2&cursor=2>; rel=next"
        status, _, body = server.request("DELETE", "/plants/1", token=token)
        assert (status, body) == (204, b"")
        status, _, body = server.request("DELETE", "/plants/1", token=token)
        assert (status, body["error"]) == (404, 404)
    with Server(tmp_path) as server:
        status, _, body = server.request("GET", "/plants", token=token)
        assert body == [{"name": f"p{i}"} for i in (0, 2, 3, 4)]
        assert server.request("POST", "/plants", {"id": 1, "name": "again"}, token)[0] == 200
        assert server.request("GET", "/plants?cursor=4", token=token)[2] == [
            {"name": "p4"}, {"name": "again"}]


@pytest.mark.slow
def test_connection_limit_and_channel_timeout_are_applied(tmp_path):
    # Waitress counts its listening socket and wake-up pipe too: 8 clients fill a limit of 10.
    with Server(tmp_path, "--connection-limit", "10", "--channel-timeout", "1") as server:
        idle = [socket.create_connection((server.host, server.port), timeout=5)
                for _ in range(10)]
        try:
            for sock in idle:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # and never the rest
            started = time.monotonic()
            status, _, _ = server.request("GET", "/health", timeout=10)
            waited = time.monotonic() - started
            assert status == 200
            assert 0.5 < waited < 4  # held back by the limit until the idle ones were closed
            assert all(sock.recv(1) == b"" for sock in idle)  # by the server, unanswered
        finally:
            for sock in idle:
                sock.close()


def test_the_probe_port_answers_a_wrong_method_as_the_service_port_does(tmp_path):
    """Issue 46: POST /health answered 404 on the probe port and 405 with Allow on the
    service's port; both now say 405 and Allow, in the Error shape."""
    from support.servers import free_port, http_request

    probes = free_port()
    with Server(tmp_path, "--probe-port", str(probes)) as server:
        ours = http_request("127.0.0.1", probes, "POST", "/health", b"")
        theirs = server.request("POST", "/health", b"")
        elsewhere = http_request("127.0.0.1", probes, "GET", "/plants")[0]
    assert elsewhere == 404
    for status, headers, body in (ours, theirs):
        assert status == 405 and body["error"] == 405, (status, body)
        assert {method.strip() for method in headers["Allow"].split(",")} >= {"GET", "HEAD"}
