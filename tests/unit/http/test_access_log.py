"""Access lines: one per request, written by a background thread, never a token or body."""

import io
import time
from http import HTTPStatus

import falcon
import webtest
from hypothesis import given, settings
from hypothesis import strategies as st

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.http.access_log import AccessLog
from plant_store.logs import escape, timestamp
from plant_store.stores import MemoryStore


def logged_app(tokens, token, log_level="info"):
    stream = io.StringIO()
    app = create_app(Config(store="memory", log_level=log_level), store=MemoryStore(),
                     tokens=tokens, log_stream=stream)
    return webtest.TestApp(app, extra_environ={"HTTP_AUTHORIZATION": f"Bearer {token}"}), stream


def lines_when(stream, count):
    """The stream's lines once ``count`` have been flushed (the flusher runs every 0.2 s)."""
    deadline = time.monotonic() + 5
    while len(lines := stream.getvalue().splitlines()) < count:
        assert time.monotonic() < deadline, f"expected {count} access lines, got {lines}"
        time.sleep(0.02)
    return lines


def test_one_line_per_request_without_token_or_body(tokens, token):
    app, stream = logged_app(tokens, token)
    app.post_json("/plants", {"id": 1, "name": "secret-name"}, status=200)
    app.get("/nope", status=404)
    first, second = lines_when(stream, 2)
    assert first.split()[2:4] == ["INFO", "[plant_store.access]"]
    method, path, status, duration, request_id = first.split()[5:]
    assert (method, path, status) == ("POST", "/plants", "200")
    assert duration.endswith("ms") and float(duration[:-2]) >= 0
    assert request_id != second.split()[-1]  # one id per request
    assert second.split()[5:8] == ["GET", "/nope", "404"]
    assert token not in stream.getvalue() and "secret-name" not in stream.getvalue()


def test_rejected_requests_are_logged_too(tokens, token):
    app, stream = logged_app(tokens, token)
    app.extra_environ = {}
    app.post_json("/plants", {"id": 1, "name": "x"}, status=401)
    assert [line.split()[5:8] for line in lines_when(stream, 1)] == [["POST", "/plants", "401"]]


def test_probes_are_logged_only_at_debug(tokens, token):
    app, stream = logged_app(tokens, token)
    app.get("/health")
    app.get("/ready")
    app.get("/metrics")
    app.get("/openapi.json")
    app.get("/nope", status=404)  # a line that is logged, so the probes had their chance
    assert [line.split()[6] for line in lines_when(stream, 1)] == ["/nope"]

    app, stream = logged_app(tokens, token, "debug")
    app.get("/health")
    assert [line.split()[2:8] for line in lines_when(stream, 1)] == [
        ["DEBUG", "[plant_store.access]", "127.0.0.1", "GET", "/health", "200"]]


def test_a_refused_probe_path_is_logged_at_info(tokens, token):
    # Someone guessing tokens against /metrics must leave lines, with their address.
    app, stream = logged_app(tokens, token)
    app.extra_environ = {"HTTP_AUTHORIZATION": "Bearer guess"}
    app.get("/metrics", status=401)
    assert [line.split()[2:8] for line in lines_when(stream, 1)] == [
        ["INFO", "[plant_store.access]", "127.0.0.1", "GET", "/metrics", "401"]]


def test_no_access_lines_above_info(tokens, token):
    app, stream = logged_app(tokens, token, "warning")
    app.post_json("/plants", {"id": 1, "name": "x"}, status=200)
    time.sleep(0.5)
    assert stream.getvalue() == ""




def _one_line(entry):
    """An access line as the formatter wrote it one line at a time before issue 37."""
    now, level, remote_addr, method, path, status, elapsed, request_id = entry
    client = (remote_addr, method, path, request_id)
    chosen = "".join(client)
    if not chosen.isprintable() or "\\" in chosen:
        remote_addr, method, path, request_id = (escape(f) for f in client)
    tenths = round(elapsed * 10000)
    return (f"{timestamp(now)} {level} [plant_store.access] {remote_addr} {method} "
            f"{path} {falcon.http_status_to_code(status)} {tenths // 10}.{tenths % 10}ms "
            f"{request_id}\n")


_FIELD = st.text(max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(
    st.floats(1.7e9, 1.8e9), st.sampled_from(["INFO", "DEBUG"]), _FIELD, _FIELD, _FIELD,
    st.sampled_from(["200 OK", "404 Not Found", 201, falcon.HTTP_503, HTTPStatus.CONFLICT]),
    st.floats(0, 100), _FIELD), max_size=20))
def test_a_batch_is_formatted_as_each_line_was_alone(entries):
    access = AccessLog(io.StringIO(), "info", frozenset())
    assert access._text(entries) == "".join(map(_one_line, entries))
