"""Access lines: one per request, written by a background thread, never a token or body."""

import datetime
import fcntl
import io
import itertools
import os
import threading
import time
import types
from http import HTTPStatus

import falcon
import falcon.testing
import orjson
import webtest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.events import Events
from plant_store.http import access_log
from plant_store.http.access_log import FLUSH_INTERVAL, AccessLog, flush_all
from plant_store.http.request_id import SANE
from plant_store.logs import FORMAT, LineQueue, TextFormatter, escape, timestamp
from plant_store.metrics import for_config
from plant_store.stores import MemoryStore
from support.access_logs import Stalled, lines_when, logged_app


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


def test_a_line_has_its_answer_s_wall_clock_time(tokens, token):
    """A record keeps the answer's time.perf_counter(), one clock call less a request; the
    line's time is the wall clock's at the answer, to the millisecond, in both formats."""
    app, stream = logged_app(tokens, token)
    before = time.time()
    app.get("/nope", status=404)
    after = time.time()
    (line,) = lines_when(stream, 1)
    stamp = datetime.datetime.strptime(" ".join(line.split()[:2]), "%Y-%m-%d %H:%M:%S,%f")
    assert int(before * 1000) / 1000 <= stamp.timestamp() <= after
    access = AccessLog(io.StringIO(), "info", frozenset(), log_format="json")
    now = time.perf_counter()
    written = orjson.loads(access._format(
        [("INFO", [(now, "127.0.0.1", "GET", "", "/", "200 OK", 0.0, "id", None)])],
        time.time() - now))["time"]
    moment = datetime.datetime.fromisoformat(written.replace("Z", "+00:00")).timestamp()
    assert abs(moment - time.time()) < 1


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
_ID = st.from_regex(SANE, fullmatch=True)  # what a record's request id is: the next test


def _runs(lines):
    """(level, record) lines as the access log queues them: runs of one level."""
    return [(level, [record for _, record in run])
            for level, run in itertools.groupby(lines, lambda line: line[0])]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(
    st.floats(1.7e9, 1.8e9), st.sampled_from(["INFO", "DEBUG"]), _FIELD, _FIELD, _FIELD,
    st.sampled_from(["200 OK", "404 Not Found", 201, falcon.HTTP_503, HTTPStatus.CONFLICT]),
    st.floats(0, 100), _ID), max_size=20), st.sampled_from(["", "/api", "/a\nb"]))
def test_a_batch_is_formatted_as_each_line_was_alone(entries, script_name):
    """The access log queues lines in runs of one level, each record as the request's
    thread made it (the mount point apart from the path); the text is each line's of
    before."""
    access = AccessLog(io.StringIO(), "info", frozenset())
    lines = [(level, (now, remote_addr, method, script_name, path, status, elapsed,
                      request_id, None))
             for now, level, remote_addr, method, path, status, elapsed, request_id in entries]
    assert access._format(_runs(lines), 0.0) == "".join(
        _one_line((now, level, remote_addr, method, script_name + path, *rest))
        for now, level, remote_addr, method, path, *rest in entries)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=40), _ID))
def test_a_recorded_request_id_never_needs_escapes(given_id):
    """The text lines write request ids unescaped (access_log._text_of): whatever
    X-Request-ID a client sends, the id recorded is one SANE lets through, the client's or
    one made here."""
    access = AccessLog(io.StringIO(), "info", frozenset(), batch=10**6)
    env = falcon.testing.create_environ(path="/plants")
    if given_id is not None:
        env["HTTP_X_REQUEST_ID"] = given_id
    req, resp = falcon.Request(env), falcon.Response()
    access.process_request(req, resp)
    access.process_response(req, resp, None, True)
    (record,) = access._answered
    assert SANE.fullmatch(record[7]) and resp.get_header("X-Request-ID") == record[7]
    assert record[7] == given_id or given_id is None or not SANE.fullmatch(given_id)


def test_a_record_keeps_each_address_and_path_as_sent_with_a_bounded_memo(monkeypatch):
    """Records share equal addresses and template paths with earlier ones (the flusher
    reaches fewer strings), and still hold what each request had; the memo stays bounded."""
    monkeypatch.setattr(access_log, "ADDRESSES_KEPT", 3)
    access = AccessLog(io.StringIO(), "info", frozenset(), batch=10**6)
    sent = [(f"10.0.0.{n % 5}", path, template) for n in range(12) for path, template in
            [("/plants", "/plants"), (f"/plants/{n}", "/plants/{plant_id}"), ("/x", None)]]
    for address, path, template in sent:
        req = falcon.Request(falcon.testing.create_environ(path=path, remote_addr=address))
        req.uri_template = template
        resp = falcon.Response()
        access.process_request(req, resp)
        access.process_response(req, resp, None, True)
    assert [(r[1], r[4], r[8]) for r in access._answered] == sent
    assert len(access._addresses) == 3


_FEW = st.sampled_from(["/plants", "127.0.0.1", "POST", "a\nb", "c\\d", "é"])


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["INFO", "DEBUG"]), st.lists(st.tuples(
    st.floats(1.7e9, 1.7e9 + 0.01), _FEW, _FEW, _FEW,
    st.sampled_from(["200 OK", "409 Conflict"]),
    st.floats(0, 0.01) | st.sampled_from([0.00005, 0.00015, 0.00025]), _ID),
    min_size=1, max_size=300), st.sampled_from(["", "/api"]))
def test_a_batch_at_one_level_is_formatted_as_each_line_was_alone(level, entries, script_name):
    """The usual batch: one level, the same few clients and paths, times within a few
    milliseconds, durations at and between tenths: formatted by columns, as each alone."""
    access = AccessLog(io.StringIO(), "info", frozenset())
    lines = [(level, (now, remote_addr, method, script_name, path, status, elapsed,
                      request_id, None))
             for now, remote_addr, method, path, status, elapsed, request_id in entries]
    assert access._format(_runs(lines), 0.0) == "".join(
        _one_line((now, level, remote_addr, method, script_name + path, *rest))
        for now, remote_addr, method, path, *rest in entries)


def test_lines_waiting_for_a_stalled_destination_are_bounded_and_counted(caplog):
    # Issue 42, finding 5: every line waited, without bound, for a stderr nobody read.
    stream, dropped = Stalled(), []
    access = AccessLog(stream, "info", frozenset(), events=_Dropped(dropped), max_pending=50)
    app = falcon.App(middleware=[access])
    client = falcon.testing.TestClient(app)
    client.simulate_get("/first")
    assert stream.entered.wait(5)  # the flusher holds the first line, stuck in write()
    for _ in range(200):
        client.simulate_get("/nope")
    began = time.monotonic()
    access.flush(wait=0.2)  # as a stop does: gives up on the stuck flush
    assert time.monotonic() - began < 1
    stream.released.set()
    lines = lines_when(stream, 51)
    time.sleep(3 * FLUSH_INTERVAL)
    assert len(stream.getvalue().splitlines()) == 51  # the first, and 50 that waited
    deadline = time.monotonic() + 5
    while sum(dropped) < 150:
        assert time.monotonic() < deadline, dropped
        time.sleep(0.02)
    assert sum(dropped) == 150 and lines[0].split()[6] == "/first"
    warnings = [r.getMessage() for r in caplog.records if r.name == "plant_store.logs"]
    assert warnings == ["150 access lines dropped: their destination took none for a while "
                        "(50 may wait)"]


def test_lines_a_full_log_queue_refuses_are_counted_in_the_metrics(tokens, token):
    r, w = os.pipe()  # nobody reads it
    fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: as small as Linux makes a pipe
    queue = LineQueue(w, TextFormatter(FORMAT), limit=1000)
    app = webtest.TestApp(
        create_app(Config(store="memory"), store=(store := MemoryStore()), tokens=tokens,
                   log_stream=queue, metrics=for_config(Config(store="memory"), store)),
        extra_environ={"HTTP_AUTHORIZATION": f"Bearer {token}"})
    for _ in range(300):
        app.get("/nope", status=404)
    flush_all()
    scraped = app.get("/metrics").text
    dropped = next(s.value for f in text_string_to_metric_families(scraped)
                   for s in f.samples if s.name == "plant_store_access_lines_dropped_total")
    chunks = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: os.read(r, 1 << 16),
                                                                b"")))
    reader.start()
    deadline = time.monotonic() + 5
    while not queue.drain(0.1):
        assert time.monotonic() < deadline
    os.close(w)
    reader.join(5)
    os.close(r)
    written = b"".join(chunks).decode().count(" [plant_store.access] ")
    assert dropped > 0 and written + dropped == 300


class _Dropped(Events):
    """Events that keep what ``dropped`` is told."""

    def __init__(self, into):
        self.dropped = into.append


def test_lines_written_to_the_servers_own_handler_keep_its_level(monkeypatch):
    """Through logs.configure's handler (plant-store serve's), written straight to its
    stream: the root's level still decides, asked once per level in a batch."""
    import logging
    import sys

    from plant_store import logs

    root = logging.getLogger()
    saved = root.handlers[:], root.level, logs._own
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    try:
        logs.configure("info")
        access = AccessLog(None, "debug", frozenset({"/health"}))
        for path in ("/plants", "/health", "/plants/1"):  # /health: quiet, DEBUG
            req = types.SimpleNamespace(
                env={"REMOTE_ADDR": "10.0.0.1"}, method="GET", path=path,
                uri_template=path, context=types.SimpleNamespace())
            resp = types.SimpleNamespace(status="200 OK", set_header=lambda name, value: None)
            access.process_request(req, resp)
            access.process_response(req, resp, None, True)
        access.flush()
        written = stream.getvalue().splitlines()
        assert [line.split()[6] for line in written] == ["/plants", "/plants/1"]
        assert all(" INFO [plant_store.access] " in line for line in written)
    finally:
        root.handlers[:], logs._own = saved[0], saved[2]
        root.setLevel(saved[1])
