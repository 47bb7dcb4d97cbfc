"""GET and PUT /plants/{id}, DELETE's If-Match and the tag filter over real HTTP, on a real
server of the JSON-file store and of PostgreSQL; an update acknowledged and then kill -9:
it is there after the restart."""

import signal
import urllib.parse

import pytest

from plant_store.tokens import TokenFile
from support.servers import Server, run_cli

pytestmark = pytest.mark.slow  # real servers and PostgreSQL: .ci/run runs them after the suite


@pytest.fixture(params=["jsonfile", "postgresql"])
def serve(request, tmp_path):
    """A function starting a server of the store (again on the same data), and its token."""
    token_file = tmp_path / "tokens.json"
    token = TokenFile(str(token_file)).add("t")
    args = ["--token-file", str(token_file)]
    if request.param == "postgresql":
        args += ["--store", "postgresql", "--database-url",
                 request.getfixturevalue("database_url")]
    started = []

    def start():
        started.append(Server(tmp_path / "data", *args))
        return started[-1]

    start.token = token
    yield start
    for server in started:
        server.stop()


def test_every_row_over_http(serve):
    server, token = serve(), serve.token

    def call(method, path, body=None, **headers):
        return server.request(method, path, body, token=token, headers=headers)

    assert call("POST", "/plants", {"id": 1, "name": "Fern", "tag": "green"})[0] == 200
    status, headers, body = call("GET", "/plants/1")
    fern = headers["ETag"]
    assert (status, body) == (200, {"name": "Fern", "tag": "green"})
    status, headers, body = call("GET", "/plants/1", **{"If-None-Match": fern})
    assert (status, headers["ETag"], body) == (304, fern, b"")
    assert call("GET", "/plants/2")[0] == 404
    assert call("GET", "/plants/x")[0] == 400
    assert call("PUT", "/plants/2", {"name": "x"})[0] == 404
    assert call("PUT", "/plants/1", {"id": 2, "name": "x"})[0] == 400
    assert call("PUT", "/plants/1", {"name": "x"}, **{"If-Match": f"W/{fern}"})[0] == 412
    status, headers, body = call("PUT", "/plants/1", {"name": "Fern II"}, **{"If-Match": fern})
    new = headers["ETag"]
    assert (status, body) == (200, {"name": "Fern II"}) and new != fern
    assert call("GET", "/plants/1")[1]["ETag"] == new
    # A retry of the update that went through: 200, though its If-Match is now stale.
    assert call("PUT", "/plants/1", {"name": "Fern II"}, **{"If-Match": fern})[0] == 200
    assert call("PUT", "/plants/1", {"name": "Other"}, **{"If-Match": fern})[0] == 412
    assert call("POST", "/plants", {"id": 1, "name": "Fern II"})[0] == 200
    assert call("POST", "/plants", {"id": 1, "name": "Fern", "tag": "green"})[0] == 409
    assert call("DELETE", "/plants/1", **{"If-Match": fern})[0] == 412
    assert call("GET", "/plants/1")[2] == {"name": "Fern II"}
    assert call("DELETE", "/plants/1", **{"If-Match": new})[0] == 204
    assert call("GET", "/plants/1")[0] == 404


def test_a_retried_write_never_undoes_an_acknowledged_one(serve):
    """The hostile round 5, finding 2, over HTTP: a write whose answer was lost, retried as
    the 503 advises after another client's acknowledged write put the content back (PUT)
    or created the plant again (DELETE), is 412 and undoes nothing; versions survive a
    restart, and a version from before it is still stale after it."""
    server, token = serve(), serve.token

    def call(method, path, body=None, **headers):
        return server.request(method, path, body, token=token, headers=headers)

    assert call("POST", "/plants", {"id": 1, "name": "Fern", "tag": "indoor"})[0] == 200
    first = call("GET", "/plants/1")[1]["ETag"]
    status, headers, _ = call("PUT", "/plants/1", {"name": "Fern", "tag": "outdoor"},
                              **{"If-Match": first})
    assert status == 200  # A's answer, lost on the way
    status, headers, _ = call("PUT", "/plants/1", {"name": "Fern", "tag": "indoor"},
                              **{"If-Match": headers["ETag"]})
    assert status == 200 and headers["ETag"] != first  # B's, acknowledged
    b_version = headers["ETag"]
    assert call("PUT", "/plants/1", {"name": "Fern", "tag": "outdoor"},
                **{"If-Match": first})[0] == 412  # A's retry
    assert call("DELETE", "/plants/1", **{"If-Match": b_version})[0] == 204  # lost again
    assert call("POST", "/plants", {"id": 1, "name": "Fern", "tag": "indoor"})[0] == 200
    assert call("DELETE", "/plants/1", **{"If-Match": b_version})[0] == 412  # the retry
    status, headers, body = call("GET", "/plants/1")
    assert (status, body) == (200, {"name": "Fern", "tag": "indoor"})
    now = headers["ETag"]
    assert len({first, b_version, now}) == 3
    server.stop()
    server = serve()
    assert call("GET", "/plants/1")[1]["ETag"] == now
    for stale in (first, b_version):
        assert call("PUT", "/plants/1", {"name": "x"}, **{"If-Match": stale})[0] == 412
    assert call("PUT", "/plants/1", {"name": "x"}, **{"If-Match": now})[0] == 200


def test_put_bodies_and_places_over_http(serve):
    server, token = serve(), serve.token

    def call(method, path, body=None, **headers):
        return server.request(method, path, body, token=token, headers=headers)

    for plant_id in (3, 1, 2):
        assert call("POST", "/plants", {"id": plant_id, "name": f"p{plant_id}", "tag": "t"})[
            0] == 200
    status, _, body = call("PUT", "/plants/1", {"name": "p1"})  # absent tag: removed
    assert (status, body) == (200, {"name": "p1"})
    assert call("GET", "/plants")[2] == [{"name": "p3", "tag": "t"}, {"name": "p1"},
                                         {"name": "p2", "tag": "t"}]
    assert call("PUT", "/plants/1", {"tag": "x"})[2]["message"].startswith("name: ")
    assert call("PUT", "/plants/1", {"name": "x", "tag": None})[0] == 400
    assert call("PUT", "/plants/1", "[1]")[0] == 400
    assert call("PUT", "/plants/1", '{"name": "x"}', **{"Content-Type": "text/plain"})[0] == 415
    assert call("PUT", "/plants/1", {"name": "x" * 70000})[0] == 413
    assert call("PUT", "/plants/1", {"name": "x"}, **{"If-Match": "nonsense"})[0] == 400
    assert call("PUT", "/plants/1", {"name": "x"}, **{"If-None-Match": "*"})[0] == 412
    assert call("GET", "/plants/1")[2] == {"name": "p1"}


def test_the_tag_filter_pages_over_http(serve):
    server, token = serve(), serve.token
    tag = "a&b c"
    for plant_id in range(7):
        body = {"id": plant_id, "name": f"p{plant_id}"}
        if plant_id % 2 == 0:
            body["tag"] = tag
        assert server.request("POST", "/plants", body, token=token)[0] == 200
    path, names = f"/plants?limit=2&tag={urllib.parse.quote(tag)}", []
    while path:
        status, headers, page = server.request("GET", path, token=token)
        assert status == 200
        names += [plant["name"] for plant in page]
        link = headers.get("Link")
        path = link and urllib.parse.urlsplit(link[1:link.index(">")])._replace(
            scheme="", netloc="").geturl()
        assert not link or "tag=a%26b%20c" in link
    assert names == ["p0", "p2", "p4", "p6"]


def test_an_acknowledged_update_survives_kill_9(serve):
    server, token = serve(), serve.token
    for plant_id in range(50):
        assert server.request("POST", "/plants", {"id": plant_id, "name": "before"},
                              token=token)[0] == 200
    for plant_id in range(50):
        body = {"name": f"after {plant_id}", "tag": "new"}
        assert server.request("PUT", f"/plants/{plant_id}", body, token=token)[0] == 200
    server.stop(signal.SIGKILL)
    server = serve()
    for plant_id in range(50):
        status, _, body = server.request("GET", f"/plants/{plant_id}", token=token)
        assert (status, body) == (200, {"name": f"after {plant_id}", "tag": "new"})
    status, _, page = server.request("GET", "/plants?tag=new&limit=100", token=token)
    assert [plant["name"] for plant in page] == [f"after {n}" for n in range(50)]


def test_plants_get_shows_the_etag_of_the_plant_as_updated(tmp_path):
    data = tmp_path / "data"
    with Server(data) as server:
        token = server.first_token
        assert server.request("POST", "/plants", {"id": 3, "name": "a"}, token=token)[0] == 200
        status, headers, _ = server.request("PUT", "/plants/3", {"name": "b", "tag": "t"},
                                            token=token)
        assert status == 200
        got = run_cli("plants", "get", "3", "--data-dir", str(data))
    assert got.stdout == '{"id":3,"name":"b","tag":"t"}\n'
    assert got.stderr == f"ETag: {headers['ETag']}\n"


def test_a_cross_origin_page_may_update_with_if_match_and_read_the_etag(tmp_path):
    origin = "https://plants.example"
    with Server(tmp_path, "--cors-allow-origins", origin) as server:
        token = server.first_token
        status, headers, _ = server.request("OPTIONS", "/plants/1", headers={
            "Origin": origin, "Access-Control-Request-Method": "PUT",
            "Access-Control-Request-Headers": "authorization, content-type, if-match"})
        assert status == 200
        assert "PUT" in headers["Access-Control-Allow-Methods"]
        assert "if-match" in headers["Access-Control-Allow-Headers"]
        assert server.request("POST", "/plants", {"id": 1, "name": "a"}, token)[0] == 200
        status, headers, _ = server.request("GET", "/plants/1", token=token,
                                            headers={"Origin": origin})
        assert status == 200 and "ETag" in headers["Access-Control-Expose-Headers"]


def test_a_304_and_a_204_keep_the_connection(serve):
    """Issue 46: every 304 and 204 closed the keep-alive connection (waitress closes after
    an answer with no Content-Length), so each cache revalidation cost a new connection."""
    import http.client

    server, token = serve(), serve.token
    auth = {"Authorization": f"Bearer {token}"}
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    conn.request("POST", "/plants", '{"id": 1, "name": "Fern"}',
                 {**auth, "Content-Type": "application/json"})
    conn.getresponse().read()
    conn.request("GET", "/plants/1", headers=auth)
    answer = conn.getresponse()
    answer.read()
    kept = conn.sock
    conn.request("GET", "/plants/1", headers={**auth, "If-None-Match": answer.getheader("ETag")})
    answer = conn.getresponse()
    assert (answer.status, answer.read(), answer.getheader("Connection")) == (304, b"", None)
    conn.request("DELETE", "/plants/1", headers=auth)
    answer = conn.getresponse()
    assert (answer.status, answer.read(), answer.getheader("Connection")) == (204, b"", None)
    conn.request("GET", "/plants/1", headers=auth)
    assert conn.getresponse().status == 404
    assert conn.sock is kept, "a new connection was made"
    conn.close()
