"""A body over ``max_body_size`` is refused by waitress as it arrives, before the app and its
token check, and never read (or spooled to disk) past the limit."""

import json
import time

import pytest

from support.servers import Server, exchange

HUGE = 300  # MiB offered, far past the 64 KiB limit
MIB = b" " * (1 << 20)


def written(pid):
    """Bytes the process has written to files (a spooled body among them)."""
    with open(f"/proc/{pid}/io") as fh:
        return int(dict(line.split(": ") for line in fh.read().splitlines())["wchar"])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("data")) as server:
        server.token = server.first_token
        yield server


def post_head(server, framing, authorized, extra=""):
    auth = f"Authorization: Bearer {server.token}\r\n" if authorized else ""
    length = ("Transfer-Encoding: chunked" if framing == "chunked"
              else f"Content-Length: {HUGE << 20}")
    return (f"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{auth}"
            f"{length}\r\n{extra}\r\n").encode()


def huge_body(framing):
    frame = b"100000\r\n" + MIB + b"\r\n" if framing == "chunked" else MIB
    return (frame for _ in range(HUGE))


def assert_too_large(answer):
    assert answer.status == 413
    assert answer.headers["content-type"] == "application/json"
    assert answer.body == {"error": 413,
                    "message": "The request body is larger than the limit of 65536 bytes."}


@pytest.mark.parametrize("authorized", [True, False], ids=["token", "no-token"])
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_huge_body_is_refused_at_the_limit_unread(server, framing, authorized):
    written_before = written(server.proc.pid)
    started = time.monotonic()
    answer = exchange(server.host, server.port, post_head(server, framing, authorized),
                      huge_body(framing))
    assert time.monotonic() - started < 2
    assert_too_large(answer)
    # recv() is not counted in /proc/<pid>/io, so bound the server's reads by what the client
    # could send before it stopped reading (the sockets' buffers, a few MiB at most).
    assert answer.sent < 32 << 20  # of 300 MiB offered
    time.sleep(0.1)  # the access log's flush, if any
    assert written(server.proc.pid) - written_before < 64 * 1024  # nothing spooled to disk


def test_expect_100_continue_gets_413_without_an_invitation(server):
    answer = exchange(server.host, server.port,
                      post_head(server, "content-length", True, "Expect: 100-continue\r\n"),
                      huge_body("content-length"))
    assert_too_large(answer)
    assert answer.raw.startswith(b"HTTP/1.1 413 ")  # no "100 Continue" first


def test_exactly_the_limit_is_read_and_one_byte_more_is_refused_unsent(server):
    plant = json.dumps({"id": 1, "name": "edge"}).encode()
    status, _, body = server.request("POST", "/plants", plant + b" " * (65536 - len(plant)),
                                     server.token)
    assert (status, body) == (200, {"name": "edge"})
    head = (f"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {server.token}\r\nContent-Length: 65537\r\n\r\n").encode()
    answer = exchange(server.host, server.port, head, timeout=2)  # the body is never sent
    assert_too_large(answer)
    assert answer.headers["connection"] == "close"
