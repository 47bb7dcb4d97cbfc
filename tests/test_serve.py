"""End to end: ``plant-store serve`` on waitress, over real HTTP, across restarts."""

import http.client
import json

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
