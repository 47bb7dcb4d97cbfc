"""Every use ``plant-store serve`` makes of waitress's internals, in one place.

Each name below was read in waitress 3.0.2 (setup.cfg allows 3.0.x only), and
tests/test_waitress_pins.py checks each against the waitress installed, so a release that
changes one fails there, naming it. Waitress documents ``serve()`` alone, which runs its
own loop and takes adjustments only; beyond its adjustments (``send_bytes``,
``asyncore_use_poll``, ...) and a MultiSocketServer's ``map`` and ``effective_listen``,
this relies on:

- ``waitress.server.create_server``, undocumented, for a server object to run ourselves,
  and its ``_dispatcher`` (a test shim): the one way to give the listeners a task
  dispatcher of our own (:class:`LaneDispatcher`); ``threads`` only sizes waitress's pool.
- ``ThreadedTaskDispatcher.add_task`` is given the channel, whose ``requests[0]`` is the
  parsed request: the lane is chosen by its method and path before it waits for a thread,
  and no public hook sees a request that early.
- ``ThreadedTaskDispatcher.queue_logger``: its "Task queue depth" warning, made by the I/O
  thread for nearly every request under load (see :class:`_QueueLog`); a filter on the
  ``waitress.queue`` logger would still make a record each time, for every server.
- ``HTTPChannel.error_task_class`` and ``ErrorTask`` (``request.error``, ``status``,
  ``response_headers``, ``set_close_on_finish``, ``content_length``, ``write``): the
  answers waitress makes itself are ``text/plain``, and no setting changes their body.
- ``HTTPChannel.send_continue``: waitress would invite the body of a request it refused.
- ``BaseWSGIServer.channel_class``: the listener makes each connection's channel from it;
  ``create_server`` takes no channel class.
- The parser refuses a body once its Content-Length, or a chunked body's bytes, reach
  ``max_request_body_size`` (``>=``): the limit given is one past the largest accepted.
- ``send_bytes``: deprecated since 3.0 and still honoured (see :func:`create_server`).
- A drain in place of ``run()`` (:func:`run_until_stopped`): ``wasyncore.loop`` and
  ``close_all``, a single server's socket map ``_map``, each channel's ``requests``,
  ``total_outbufs_len`` and ``handle_close``, and the listener's ``accepting``.
- A single server's ``effective_host`` and ``effective_port`` (typeshed's stub leaves
  them out; a MultiSocketServer's ``effective_listen`` is in it).
"""

import contextlib
import functools
import logging
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import waitress.server
from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import BaseWSGIServer, MultiSocketServer
from waitress.task import ErrorTask, Task, ThreadedTaskDispatcher
from waitress.utilities import Error, queue_logger

from plant_store import errors
from plant_store.logs import Throttle

Server = BaseWSGIServer | MultiSocketServer
QUEUE_WARNING_EVERY = 10.0  # seconds: the most often waitress's queue warning is logged


def create_server(
    app: Callable[..., Iterable[bytes]], dispatcher: ThreadedTaskDispatcher,
    max_body_size: int, on_refused: Callable[[str, str, int], None] | None = None,
    **settings: Any,
) -> Server:
    """waitress's ``create_server`` with our task dispatcher, bodies of ``max_body_size``
    bytes accepted and one more refused, and waitress's own answers in the Error shape
    (:func:`use_json_errors`); ``settings`` are waitress's adjustments."""
    with warnings.catch_warnings():  # send_bytes is deprecated, and still what it says
        warnings.simplefilter("ignore", DeprecationWarning)
        server = waitress.server.create_server(
            app, _dispatcher=dispatcher, max_request_body_size=max_body_size + 1, **settings)
    use_json_errors(server, on_refused)
    return server


def listening(server: Server) -> list[tuple[str, int | str]]:
    """The (host, port) of each socket ``server`` listens on (waitress's ports are numeric
    strings; typeshed says int)."""
    if isinstance(server, MultiSocketServer):
        return list(server.effective_listen)
    return [(server.effective_host, server.effective_port)]  # type: ignore[attr-defined]


def run_until_stopped(server: Server, grace: float) -> None:
    """Serve until KeyboardInterrupt, then drain: take no new connection or request, close
    each connection as soon as nothing of its own is in flight, and keep sending answers,
    all connections at once, until none is left or ``grace`` seconds have passed.

    In place of waitress's ``run()``, which on the signal stops its I/O loop and waits for
    the workers: with ``send_bytes`` an answer waits in its connection's buffer for that
    loop to send it, so answers finished after the signal would never leave (a
    MultiSocketServer even closes every connection first). One client that cannot take
    its answer (a full window, a reset) holds back no other: the loop serves them all."""
    # The dispatchers by file descriptor (typeshed's stubs leave BaseWSGIServer's out).
    socket_map: Any = server.map if isinstance(server, MultiSocketServer) else (
        server._map)  # type: ignore[attr-defined]
    loop = functools.partial(wasyncore.loop, timeout=server.adj.asyncore_loop_timeout,
                             map=socket_map, use_poll=server.adj.asyncore_use_poll)
    with contextlib.suppress(KeyboardInterrupt):
        loop()
    for listener in list(socket_map.values()):
        if isinstance(listener, BaseWSGIServer):
            listener.accepting = False  # unaccepted connections are reset at exit
    until = time.monotonic() + grace
    while time.monotonic() < until:
        busy = False
        for channel in list(socket_map.values()):
            if not isinstance(channel, HTTPChannel):
                continue
            # A request's task pops it only once its answer is all in the buffer.
            if channel.requests or channel.total_outbufs_len:
                busy = True
            else:  # idle, or mid-way through receiving a request that nothing ran yet
                channel.handle_close()
        if not busy:
            break
        loop(timeout=0.05, count=1)
    server.task_dispatcher.shutdown(timeout=1)  # past the grace: what is left is dropped
    wasyncore.close_all(socket_map)


class _QueueLog:
    """waitress warns "Task queue depth is N" for every request that finds every thread
    busy: under load nearly every request, each line formatted and written by waitress's
    I/O thread, the one that reads every request (a tenth of a loaded PostgreSQL instance's
    creates/s, measured). The warning stays, at most once per QUEUE_WARNING_EVERY seconds,
    saying how many were held back."""

    def __init__(self) -> None:
        self._throttle = Throttle(QUEUE_WARNING_EVERY)

    def warning(self, message: str, *args: object) -> None:
        self._throttle.log(queue_logger, logging.WARNING, message, *args)


class LaneDispatcher(ThreadedTaskDispatcher):
    """waitress's pool of ``threads``, plus ``lane_threads`` of their own for the GET and
    HEAD requests to ``lane_paths``, which serve nothing else (plant_store.probe_lane).
    The choice is made per request: waitress hands the channel over again for each
    pipelined request."""

    def __init__(self, threads: int, lane_paths: Iterable[str], lane_threads: int) -> None:
        super().__init__()
        self.queue_logger = _QueueLog()  # type: ignore[assignment]  # waitress calls warning()
        self.set_thread_count(threads)
        self._paths = frozenset(lane_paths)
        self._lane = ThreadedTaskDispatcher()
        self._lane.set_thread_count(lane_threads)

    def add_task(self, task: Task) -> None:
        requests = getattr(task, "requests", None)
        request = requests[0] if requests else None  # a parsed request; maybe a bad one
        if (getattr(request, "command", None) in ("GET", "HEAD")
                and getattr(request, "path", None) in self._paths):
            self._lane.add_task(task)
        else:
            super().add_task(task)

    def shutdown(self, cancel_pending: bool = True, timeout: int = 5) -> bool:
        done = super().shutdown(cancel_pending, timeout)
        self._lane.shutdown(cancel_pending, 1)
        return done


def _message(error: Error, adj: Adjustments) -> str:
    """A plain sentence for one of waitress's errors."""
    if error.code == 431:
        return (f"The request headers are larger than the limit of "
                f"{adj.max_request_header_size} bytes.")
    if error.code == 413:  # create_server sets waitress's limit one past max_body_size
        return errors.TOO_LARGE.format(adj.max_request_body_size - 1)
    if error.code == 501:
        return ("The request's Transfer-Encoding is not supported; send the body with "
                "Content-Length or Transfer-Encoding: chunked.")
    if error.code == 400:  # waitress's reason, e.g. 'Invalid chunk size', may quote the client
        detail = str(error.body)
        return f"The request is not valid HTTP: {detail[:100].rstrip('.')}."
    return errors.INTERNAL  # its traceback is in the log, as waitress logs it


class JsonErrorTask(ErrorTask):
    """Waitress's ErrorTask with the Error JSON for a body, and waitress's status line and
    ``Connection: close``: for the requests it refuses before the app (malformed HTTP, a
    bad Content-Length, an unknown Transfer-Encoding, headers or a body over its limits)
    and the 500 when a response breaks after the app."""

    def execute(self) -> None:
        # Waitress gives an ErrorTask its parser (typeshed says an Error), whose .error this
        # is; its channel is a JsonErrorChannel, the one class that uses this task.
        error = self.request.error  # type: ignore[attr-defined]
        on_refused = self.channel.on_refused  # type: ignore[attr-defined]
        if on_refused is not None:  # the metrics: the app never sees these requests
            # A request refused in its first line has no method or path yet.
            on_refused(getattr(self.request, "command", None) or "",
                       getattr(self.request, "path", None) or "", error.code)
        body = errors.document(error.code, _message(error, self.channel.adj))
        self.status = f"{error.code} {error.reason}"
        # A list in waitress; typeshed's Sequence forbids the append it does itself.
        self.response_headers.append(("Content-Type", "application/json"))  # type: ignore[attr-defined]
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class JsonErrorChannel(HTTPChannel):
    """Waitress's channel, answering its errors with JsonErrorTask."""

    error_task_class = JsonErrorTask
    on_refused: Callable[[str, str, int], None] | None = None

    def send_continue(self) -> None:
        # Waitress would invite the body of an 'Expect: 100-continue' request it has already
        # refused (a Content-Length over the limit), then read it up to the limit.
        # send_continue runs for a request being read: self.request is never None here.
        if self.request.error is None:  # type: ignore[union-attr]
            super().send_continue()


def use_json_errors(
    server: Server, on_refused: Callable[[str, str, int], None] | None = None,
) -> None:
    """Give every listening socket of ``server`` (a MultiSocketServer has several) our
    channel; ``on_refused(method, path, status)`` is told of each error it answers."""
    channel = type("JsonErrorChannel", (JsonErrorChannel,),
                   {"on_refused": staticmethod(on_refused) if on_refused else None})
    # create_server always gives a MultiSocketServer its map: never None here.
    listeners = (server.map.values()  # type: ignore[union-attr]
                 if isinstance(server, MultiSocketServer) else [server])
    for listener in listeners:
        if isinstance(listener, BaseWSGIServer):  # not the map's wake-up triggers
            listener.channel_class = channel
