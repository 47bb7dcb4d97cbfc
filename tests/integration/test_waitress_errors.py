"""Errors waitress answers itself, before or after the app, come in the Error shape too."""

import os
import re
import signal
import subprocess
import sys

import pytest

from support.servers import Server, exchange

HEAD = b"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("data")) as server:
        yield server


def assert_waitress_error(answer, status, reason):
    assert re.match(rf"HTTP/1\.[01] {status} {reason}\r\n".encode(), answer.raw)  # waitress's
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["connection"] == "close"
    assert set(answer.body) == {"error", "message"} and answer.body["error"] == status
    message = answer.body["message"]
    assert message[0].isupper() and message.endswith(".") and "waitress" not in message
    return message


# A response header with a line break: waitress refuses it in start_response, after the app.
BAD_HEADER = """
import plant_store.http.operational as operational
def on_get(self, req, resp):
    resp.set_header("X-Broken", "line\\nbreak")
operational.HealthResource.on_get = on_get
"""


def test_a_500_waitress_makes_itself_says_nothing_of_the_internals(tmp_path):
    with Server(tmp_path, prelude=BAD_HEADER) as server:
        answer = exchange(server.host, server.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
                          timeout=3)
        message = assert_waitress_error(answer, 500, "Internal Server Error")
        assert message == ("The server failed to handle the request; "
                           "the details are in its log.")
    assert "line feed character present in header value" in "".join(server.stderr)  # logged


# Two listening sockets: waitress's create_server returns a MultiSocketServer.
TWO_SOCKETS = """
import signal, waitress
from plant_store.serving.waitress_adapter import install
def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]
server = waitress.create_server(app, listen="127.0.0.1:0 127.0.0.2:0", ident="plant-store")
install(server, request_timeout=30)
print(" ".join(f"{host}:{port}" for host, port in server.effective_listen), flush=True)
def stop(signum, frame):
    raise KeyboardInterrupt  # run() closes the sockets on it
signal.signal(signal.SIGTERM, stop)
server.run()
"""


def test_every_socket_of_a_multi_socket_server_answers_json():
    proc = subprocess.Popen([sys.executable, "-c", TWO_SOCKETS], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        addresses = proc.stdout.readline().split()
        assert len(addresses) == 2
        for address in addresses:
            host, port = address.rsplit(":", 1)
            answer = exchange(host, int(port), HEAD + b"Content-Length: ten\r\n\r\n", timeout=3)
            assert_waitress_error(answer, 400, "Bad Request")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
        proc.stdout.close()


@pytest.mark.parametrize(("request_bytes", "detail"), [
    (b"get / HTTP/1.1\r\nHost: x\r\n\r\n", 'Malformed HTTP method "get"'),
    (b"GET / HTTP/1.1\r\nHost x\r\n\r\n", "Invalid header"),
    (b"GET / HTTP/1.1\r\n folded: x\r\n\r\n", 'Malformed header line " folded: x"'),
    (HEAD + b"Content-Length: ten\r\n\r\n", "Content-Length is invalid"),
    (HEAD + b"Content-Length: -1\r\n\r\n", "Content-Length is invalid"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", "Invalid chunk size"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}XX", "Chunk not properly terminated"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n2;\x01\r\n{}\r\n", "Invalid chunk extension"),
], ids=["lower-case-method", "header-without-colon", "bad-folding", "content-length-text",
        "content-length-negative", "chunk-size", "chunk-end", "chunk-extension"])
def test_malformed_requests_are_400(server, request_bytes, detail):
    answer = exchange(server.host, server.port, request_bytes, timeout=3)
    message = assert_waitress_error(answer, 400, "Bad Request")
    assert message.startswith("The request is not valid HTTP")
    assert detail in message


def test_headers_over_the_limit_are_431(server):
    answer = exchange(server.host, server.port, b"GET /health HTTP/1.1\r\nHost: x\r\n",
                      [b"X-Padding: " + b"x" * 8000 + b"\r\n" for _ in range(40)])
    message = assert_waitress_error(answer, 431, "Request Header Fields Too Large")
    assert message == "The request headers are larger than the limit of 262144 bytes."


def test_unknown_transfer_encoding_is_501(server):
    answer = exchange(server.host, server.port,
                      HEAD + b"Transfer-Encoding: gzip\r\n\r\n", timeout=3)
    message = assert_waitress_error(answer, 501, "Not Implemented")
    assert "Transfer-Encoding" in message


def test_waitress_refusing_a_body_says_413_in_the_shape(server):
    answer = exchange(server.host, server.port, HEAD + b"Content-Length: 70000\r\n\r\n",
                      timeout=3)
    message = assert_waitress_error(answer, 413, "Request Entity Too Large")
    assert message == "The request body is larger than the limit of 65536 bytes."


