"""What plant_store.serving.waitress_adapter relies on in waitress's internals, checked in process
against the waitress installed: a release that changes one fails here, naming it (the
adapter's docstring says why each is used)."""

import contextlib
import json
import socket
import time
import warnings
from importlib.metadata import version

import pytest
import waitress.server
from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import BaseWSGIServer, MultiSocketServer
from waitress.task import ErrorTask, ThreadedTaskDispatcher, WSGITask
from waitress.utilities import queue_logger

from plant_store.serving import waitress_adapter

WAITRESS = f"waitress {version('waitress')}"


def changed(what):
    """The failure message: what the installed waitress no longer does."""
    return (f"{WAITRESS}: {what} no longer holds; plant_store.serving.waitress_adapter "
            "relies on it as read in waitress 3.0.2: read that release again before the pin moves")


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


class Recorder(ThreadedTaskDispatcher):
    """No threads: the tasks waitress hands over, kept for the test to run."""

    def __init__(self):
        super().__init__()
        self.tasks = []

    def add_task(self, task):
        self.tasks.append(task)


@contextlib.contextmanager
def server_on_port_0(**settings):
    dispatcher = Recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # send_bytes
        server = waitress.server.create_server(app, _dispatcher=dispatcher, host="127.0.0.1",
                                               port=0, **settings)
    try:
        yield server, dispatcher
    finally:
        wasyncore.close_all(server._map)


def turn(server, until):
    """Run waitress's I/O loop a turn at a time, as the drain does, until ``until()``."""
    deadline = time.monotonic() + 5
    while not until():
        assert time.monotonic() < deadline, changed("the I/O loop serving this connection")
        wasyncore.loop(timeout=0.05, map=server._map, use_poll=server.adj.asyncore_use_poll,
                       count=1)


def request(server, dispatcher, data):
    """A client connection sending ``data``, and the channel waitress handed over."""
    client = socket.create_connection((server.effective_host, server.effective_port))
    client.sendall(data)
    turn(server, lambda: dispatcher.tasks)
    return client, dispatcher.tasks.pop()


def test_create_server_uses_the_dispatcher_and_hands_it_the_channel():
    with server_on_port_0() as (server, dispatcher):
        assert isinstance(server, BaseWSGIServer), changed("one address: one BaseWSGIServer")
        assert server.task_dispatcher is dispatcher, changed("create_server(_dispatcher=...)")
        client, task = request(server, dispatcher, b"GET /health?x=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        with client:
            assert isinstance(task, HTTPChannel), changed("add_task given the HTTPChannel")
            parsed = task.requests[0]
            assert (parsed.command, parsed.path) == ("GET", "/health"), changed(
                "the channel's requests[0] is the parsed request (command, path)")


def test_the_listener_makes_channels_from_channel_class_in_its_map():
    with server_on_port_0() as (server, dispatcher):
        assert server.channel_class is HTTPChannel, changed("BaseWSGIServer.channel_class")
        assert server._map.get(server.socket.fileno()) is server, changed(
            "a BaseWSGIServer's socket map _map")
        assert (server.effective_host, int(server.effective_port)) == (
            server.socket.getsockname()[:2]), changed("BaseWSGIServer.effective_host/_port")
        server.channel_class = type("Ours", (HTTPChannel,), {})
        client, task = request(server, dispatcher, b"GET / HTTP/1.1\r\n\r\n")
        with client:
            assert type(task) is server.channel_class, changed("accept uses channel_class")
            assert task in server._map.values(), changed("channels in _map")
        assert server.accepting and server.readable(), changed("a listener's accepting")
        server.accepting = False
        assert not server.readable(), changed("accepting = False: no connection accepted")


def test_a_multi_socket_server_has_each_listener_in_its_map():
    dispatcher = Recorder()
    server = waitress.server.create_server(app, _dispatcher=dispatcher,
                                           listen="127.0.0.1:0 127.0.0.1:0")
    try:
        assert isinstance(server, MultiSocketServer), changed("two addresses: MultiSocketServer")
        listeners = [d for d in server.map.values() if isinstance(d, BaseWSGIServer)]
        assert len(listeners) == len(server.effective_listen) == 2, changed(
            "a MultiSocketServer's map holds each listener")
        assert all(listener.task_dispatcher is dispatcher and listener.channel_class is
                   HTTPChannel for listener in listeners), changed("each listener's names")
    finally:
        wasyncore.close_all(server.map)
    assert not server.map, changed("wasyncore.close_all(map) empties the map")


def test_the_channel_has_the_names_the_adapter_uses():
    assert HTTPChannel.error_task_class is ErrorTask, changed("HTTPChannel.error_task_class")
    for name in ("send_continue", "handle_close", "total_outbufs_len", "service"):
        assert hasattr(HTTPChannel, name), changed(f"HTTPChannel.{name}")


def test_the_error_task_class_answers_what_waitress_refuses():
    """The adapter's ErrorTask sets status, response_headers, content_length and writes:
    waitress sends what it set, for a request with ``request.error``."""
    with server_on_port_0() as (server, dispatcher):
        waitress_adapter.install(server, request_timeout=30)
        client, task = request(server, dispatcher,
                               b"POST / HTTP/1.1\r\nContent-Length: ten\r\n\r\n")
        with client:
            assert task.requests[0].error.code == 400, changed("request.error on a bad request")
            task.service()  # send_bytes 1: written to the socket as it is made
            client.settimeout(5)
            head, _, body = client.recv(65536).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n"), changed(
            "error_task_class's status") + f": {head!r}"
        assert b"\r\nContent-Type: application/json" in head, changed("response_headers")
        assert b"\r\nConnection: close" in head, changed("ErrorTask.set_close_on_finish")
        assert f"\r\nContent-Length: {len(body)}".encode() in head, changed("content_length")
        assert json.loads(body)["error"] == 400, changed("ErrorTask.write")


@pytest.mark.parametrize(("head", "body"), [
    (b"Content-Length: 10", b""),
    # A chunked body counts as sent, chunk-size lines too: five bytes, ten on the wire.
    (b"Transfer-Encoding: chunked", b"5\r\nabcde\r\n")])
def test_the_parser_refuses_a_body_that_reaches_the_limit(head, body):
    def parse(limit):
        parser = HTTPRequestParser(Adjustments(max_request_body_size=limit))
        data = b"POST / HTTP/1.1\r\n%s\r\n\r\n%s" % (head, body)
        while data and not parser.completed:  # as the channel feeds it
            data = data[parser.received(data):]
        return parser.error

    assert parse(11) is None, changed("a body one byte under max_request_body_size accepted")
    assert getattr(parse(10), "code", None) == 413, changed(
        "the parser's >=: a body of max_request_body_size bytes refused")


def test_send_continue_invites_even_a_refused_body():
    """Why Channel.send_continue checks request.error."""
    errors = []

    class Recording(HTTPChannel):
        def send_continue(self):
            errors.append(self.request.error)
            super().send_continue()

    with server_on_port_0(max_request_body_size=10) as (server, _), socket.create_connection(
            (server.effective_host, server.effective_port)) as client:
        server.channel_class = Recording
        client.sendall(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n")
        turn(server, lambda: errors)
    assert [getattr(error, "code", None) for error in errors] == [413], changed(
        "send_continue called for an 'Expect: 100-continue' request refused at its headers")


def test_send_bytes_holds_an_answer_for_the_io_loop():
    """The drain: a request stays in ``requests`` until its answer is all in the buffer,
    then waits in ``total_outbufs_len`` for the loop; ``handle_close`` leaves the map."""
    with pytest.warns(DeprecationWarning):
        assert Adjustments(send_bytes=18000).send_bytes == 18000, changed("send_bytes")
    with server_on_port_0(send_bytes=18000) as (server, dispatcher):
        client, channel = request(server, dispatcher, b"GET / HTTP/1.1\r\n\r\n")
        with client:
            assert channel.requests, changed("HTTPChannel.requests holds the request served")
            channel.service()
            assert not channel.requests and channel.total_outbufs_len > 0, changed(
                "an answer under send_bytes waits in total_outbufs_len, its request popped")
            turn(server, lambda: not channel.total_outbufs_len)
            client.settimeout(5)
            assert client.recv(65536).startswith(b"HTTP/1.1 200 OK"), changed("the loop sends")
            channel.handle_close()
            assert channel not in server._map.values(), changed("handle_close leaves _map")


def test_the_queue_warning_goes_to_queue_logger():
    assert ThreadedTaskDispatcher.queue_logger is queue_logger, changed("queue_logger")
    said = []

    class Log:
        def warning(self, message, *args):
            said.append(message % args)

    class Task:
        def cancel(self):
            pass

    dispatcher = ThreadedTaskDispatcher()  # no threads: the task waits
    dispatcher.queue_logger = Log()
    dispatcher.add_task(Task())
    dispatcher.shutdown(timeout=0)
    assert said == ["Task queue depth is 1"], changed("add_task warns through queue_logger")


def test_readable_runs_the_upkeep_and_accepts_nothing_at_the_limit():
    """Upkeep replaces ``maintenance(now)``, which the listener's ``readable()`` calls
    every ``cleanup_interval``; it finds the connections in ``active_channels``, and
    ``held`` means the listener accepts nothing (its map at ``connection_limit``)."""
    with server_on_port_0(cleanup_interval=1) as (server, dispatcher):
        calls = []
        server.maintenance = calls.append
        server.next_channel_cleanup = 0
        assert server.readable(), changed("a listener below its limit accepts")
        assert len(calls) == 1 and isinstance(calls[0], float), changed(
            "readable() calls maintenance(now) once cleanup_interval has passed")
        assert server.readable() and len(calls) == 1, changed(
            "maintenance waits for cleanup_interval")
        client, channel = request(server, dispatcher, b"GET / HTTP/1.1\r\n\r\n")
        with client:
            assert server.active_channels.get(channel._fileno) is channel, changed(
                "active_channels holds each channel by its descriptor, _fileno")
            server.adj.connection_limit = len(server._map)
            assert not server.readable(), changed(
                "no connection accepted while _map holds connection_limit dispatchers")


def test_every_byte_a_channel_sends_goes_through_send():
    """The minimum rate counts what ``send`` returns."""
    counted = []

    class Counting(HTTPChannel):
        def send(self, data, do_close=True):
            sent = super().send(data, do_close)
            counted.append(sent)
            return sent

    with server_on_port_0() as (server, dispatcher):
        server.channel_class = Counting
        client, channel = request(server, dispatcher, b"GET / HTTP/1.1\r\n\r\n")
        with client:
            channel.service()  # send_bytes 1: written to the socket as it is made
            turn(server, lambda: not channel.total_outbufs_len)
            client.settimeout(5)
            received = b""
            while not received.endswith(b"ok"):
                received += client.recv(65536)
    assert sum(counted) == len(received) > 0, changed("HTTPChannel sends through send()")


def test_a_request_the_parser_leaves_bodiless_is_handed_over_at_its_headers():
    """What the adapter's parser does to an 'Expect: 100-continue' request whose token it
    refuses: waitress completes it at its headers, invites no body, and closes after the
    answer."""
    with server_on_port_0() as (server, dispatcher):
        waitress_adapter.install(server, request_timeout=30, may_continue=lambda header: False)
        client, channel = request(server, dispatcher, b"POST / HTTP/1.1\r\nExpect: 100-continue"
                                  b"\r\nAuthorization: Bearer x\r\nContent-Length: 30\r\n\r\n")
        with client:
            assert channel.requests[0].get_body_stream().read() == b"", changed(
                "a request whose body_rcv parse_header left None has no body")
            channel.service()
            turn(server, lambda: channel not in server._map.values())
            client.settimeout(5)
            received = b""
            while data := client.recv(65536):
                received += data
    assert received.startswith(b"HTTP/1.1 200 OK\r\n"), changed(
        "no 100 Continue for a request whose expect_continue parse_header cleared")
    assert b"\r\nConnection: close" in received, changed(
        "the task closes after a request whose CONNECTION header says close")


@pytest.mark.parametrize("status", ["204 No Content", "304 Not Modified"])
def test_waitress_closes_after_a_bodiless_answer_and_the_task_keeps_it(status):
    """waitress closes an HTTP/1.1 connection after an answer with no Content-Length, a
    204 and a 304 too (``set_close_on_finish`` from ``build_response_header``); the
    adapter's task keeps those, and only those, open."""
    def bodiless(environ, start_response):
        start_response(status, [])
        return []

    with server_on_port_0() as (server, dispatcher):
        client, channel = request(server, dispatcher, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        with client:
            server.application = bodiless
            stock = WSGITask(channel, channel.requests[0])
            stock.status, stock.response_headers = status, []
            assert b"Connection: close" in stock.build_response_header() and (
                stock.close_on_finish), changed("a bodiless HTTP/1.1 answer closes")
            ours = waitress_adapter._Task(channel, channel.requests[0])
            ours.status, ours.response_headers = status, []
            assert b"Connection: close" not in ours.build_response_header()
            assert not ours.close_on_finish
            asked = waitress_adapter._Task(channel, channel.requests[0])
            asked.status, asked.response_headers = "200 OK", []
            assert b"Connection: close" in asked.build_response_header()  # a body, no length
