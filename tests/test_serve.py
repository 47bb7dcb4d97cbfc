"""End to end: ``plant-store serve`` on waitress, over real HTTP, across restarts."""

import http.client
import json
import signal
import socket
import threading
import time

import pytest

from serverproc import Server


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
    assert len((tmp_path / "plants.jsonl").read_bytes().splitlines()) == 20


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
from plant_store.stores.jsonfile import JsonFileStore
create = JsonFileStore.create
def slow_create(self, plant, webhooks=()):
    print("slow create started", file=sys.stderr, flush=True)
    time.sleep(1.5)
    return create(self, plant, webhooks)
JsonFileStore.create = slow_create
"""


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
        started = time.monotonic() + 10  # under load, the request may take a while to come
        while "slow create started" not in "".join(server.stderr):
            assert time.monotonic() < started, "".join(server.stderr)
            time.sleep(0.02)
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
