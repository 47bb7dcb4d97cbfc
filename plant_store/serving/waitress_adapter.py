"""Every use ``plant-store serve`` makes of waitress's internals, in one place: its server
and each connection's channel, parser, task and upkeep (running the server's loop and
threads is :mod:`plant_store.serving.waitress_loop`'s, which needs no private name).

Each name below was read in waitress 3.0.2 (setup.cfg allows 3.0.x only), and
tests/integration/test_waitress_pins.py checks each against the waitress installed, so a
release that changes one fails there, naming it. Waitress documents ``serve()`` alone,
which runs its own loop and takes adjustments only; beyond its adjustments (``send_bytes``,
``asyncore_use_poll``, ...) and a MultiSocketServer's ``map`` and ``effective_listen``,
this relies on:

- ``waitress.server.create_server``, undocumented, for a server object to run ourselves,
  and its ``_dispatcher`` (a test shim): the one way to give the listeners a task
  dispatcher of our own (:class:`LaneDispatcher`); ``threads`` only sizes waitress's pool.
- ``HTTPChannel.error_task_class`` and ``ErrorTask`` (``request.error``, ``status``,
  ``response_headers``, ``set_close_on_finish``, ``content_length``, ``write``): the
  answers waitress makes itself are ``text/plain``, and no setting changes their body.
- ``HTTPChannel.send_continue``: waitress would invite the body of a request it refused.
- ``BaseWSGIServer.channel_class``: the listener makes each connection's channel from it;
  ``create_server`` takes no channel class.
- The parser refuses a body once its Content-Length, or a chunked body's bytes, reach
  ``max_request_body_size`` (``>=``): the limit given is one past the largest accepted.
- ``send_bytes``: deprecated since 3.0 and still honoured (see :func:`create_server`).
- ``WSGITask.build_response_header`` calls ``set_close_on_finish`` when an HTTP/1.1 answer
  has no Content-Length, 204 and 304 included (``has_body``, ``version``): :class:`_Task`
  keeps those connections.
- The listener's ``maintenance(now)``, called by its ``readable()`` every
  ``cleanup_interval`` from the I/O thread, replaced by :class:`Upkeep`, which reads each
  channel's ``last_activity``, ``request``, ``will_close`` and the listener's
  ``active_channels``; a listener accepts nothing while its map holds
  ``connection_limit`` dispatchers.
- Every byte a channel sends goes through ``wasyncore.dispatcher.send`` (counted for the
  minimum rate).
- ``HTTPRequestParser.parse_header`` sets ``expect_continue``, ``body_rcv`` and
  ``content_length``; ``received`` completes a request whose ``body_rcv`` it left None,
  and the task closes after a request whose ``CONNECTION`` header says ``close``.
- A single server's socket map ``_map`` (:func:`socket_map`), and its ``effective_host``
  and ``effective_port`` (typeshed's stub leaves them out; a MultiSocketServer's
  ``effective_listen`` is in it).
"""

import contextlib
import copy
import fcntl
import socket
import struct
import termios
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import waitress.server
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import BaseWSGIServer, MultiSocketServer
from waitress.task import ErrorTask, ThreadedTaskDispatcher, WSGITask
from waitress.utilities import Error, RequestEntityTooLarge

from plant_store.http import errors

Server = BaseWSGIServer | MultiSocketServer


def create_server(
    app: Callable[..., Iterable[bytes]], dispatcher: ThreadedTaskDispatcher,
    max_body_size: int, request_timeout: float, min_send_rate: int = 0,
    send_rate_window: float = 20,
    on_refused: Callable[[str, str, int], None] | None = None,
    may_continue: Callable[[str | None], bool] | None = None,
    **settings: Any,
) -> Server:
    """waitress's ``create_server`` with our task dispatcher, bodies of ``max_body_size``
    bytes accepted and one more refused, its I/O loop on ``poll()`` (``select()`` fails
    once a descriptor passes 1023), our channel (:class:`Channel`) and connection upkeep
    (:class:`Upkeep`); ``settings`` are waitress's adjustments."""
    with warnings.catch_warnings():  # send_bytes is deprecated, and still what it says
        warnings.simplefilter("ignore", DeprecationWarning)
        server = waitress.server.create_server(
            app, _dispatcher=dispatcher, max_request_body_size=max_body_size + 1,
            asyncore_use_poll=True, **settings)
    install(server, request_timeout, min_send_rate, send_rate_window, on_refused,
            may_continue)
    return server


def install(
    server: Server, request_timeout: float, min_send_rate: int = 0,
    send_rate_window: float = 20,
    on_refused: Callable[[str, str, int], None] | None = None,
    may_continue: Callable[[str | None], bool] | None = None,
) -> None:
    """Give every listening socket of ``server`` (a MultiSocketServer has several) our
    channel and upkeep; ``on_refused(method, path, status)`` is told of each error
    waitress answers itself, ``may_continue(authorization)`` says whether a request's
    token is worth inviting its body for (if not, it is answered at once, unread)."""
    parser = type("Parser", (_Parser,), {
        "may_continue": staticmethod(may_continue) if may_continue else None})
    channel = type("Channel", (Channel,), {
        "on_refused": staticmethod(on_refused) if on_refused else None,
        "parser_class": parser})
    for listener in _listeners(server):
        listener.channel_class = channel
        # An instance attribute in place of the method waitress's readable() calls.
        listener.maintenance = Upkeep(  # type: ignore[method-assign]
            listener, request_timeout, min_send_rate, send_rate_window)


def _listeners(server: Server) -> list[BaseWSGIServer]:
    # create_server always gives a MultiSocketServer its map: never None here.
    found = (server.map.values()  # type: ignore[union-attr]
             if isinstance(server, MultiSocketServer) else [server])
    return [each for each in found if isinstance(each, BaseWSGIServer)]  # not the triggers


def all_slots_held(server: Server) -> bool:
    """Whether, at the last upkeep, every connection slot of ``server`` was held and none
    could be freed: a new client waits until a connection ends of itself."""
    upkeeps: list[Any] = [listener.maintenance for listener in _listeners(server)]
    return any(isinstance(upkeep, Upkeep) and upkeep.held for upkeep in upkeeps)


EVICT_AFTER = 1.0  # seconds a connection may sit idle, or its answer wait, at the limit
HEADROOM = 20  # at the limit, the upkeep frees one connection slot in this many


class Upkeep:
    """What waitress's own upkeep does (close connections idle for ``channel_timeout``),
    run as it by the listener's I/O thread every ``cleanup_interval``, and so that no
    client can hoard connections or pin a thread:

    - a connection whose request has not arrived whole ``request_timeout`` after its first
      byte, or whose answer has not moved for as long (a client that does not read), is
      closed (a thread blocked writing to it is let go), as is one that sent nothing for
      ``channel_timeout`` while no request of its ran. One with an answer unsent is closed
      here, in the I/O thread: waitress acts on its ``will_close`` mark only when the
      socket is writable, which a client that does not read never makes it;
    - an answer must move at ``min_rate`` bytes a second (0: any), averaged over
      ``window`` seconds of waiting for its client, or its connection is closed: a client
      that reads a trickle keeps its answer moving, so ``request_timeout`` never fires.
      Waiting is counted by upkeep: each interval at whose end an answer is unsent (so
      the app's time, and a client that reads at once, count nothing); the bytes the
      client took since the window began count whenever it took them (not those merely
      sent: the kernel may buffer megabytes). At each ``window`` of waiting the rate is
      judged and a new window begins (:attr:`Channel.waited`);
    - at ``connection_limit``, every connection that has sent nothing for EVICT_AFTER
      seconds and has no request running nor answer unsent (idle keep-alive connections,
      requests arriving slowly) is closed, so that new clients get in: HTTP lets a
      server close an idle connection, and a client that reuses one sends again. If that
      leaves less than one slot in HEADROOM free, the connections whose answers have
      waited EVICT_AFTER seconds or more are closed too, the slowest readers first, until
      it does. The slowest, not a cap per address: behind a reverse proxy every
      connection has the proxy's address, and an attacker has many addresses; the
      slowest reader holds its slot longest for the least it takes, and a client that
      reads at once is never among them (its answer never waits);
    - a connection closed here for its answer is reset (:meth:`Channel.abort`);
    - :attr:`held`: whether every slot stayed held after all that (the probe port's
      ``/ready`` says so)."""

    def __init__(self, listener: BaseWSGIServer, request_timeout: float, min_rate: int,
                 window: float) -> None:
        self._listener = listener
        self._request_timeout, self._min_rate, self._window = request_timeout, min_rate, window
        self._last = 0.0
        self.held = False

    def __call__(self, now: float) -> None:
        listener, adj = self._listener, self._listener.adj
        step, self._last = (now - self._last if self._last else 0.0), now
        idle_cutoff, cutoff = now - adj.channel_timeout, now - self._request_timeout
        idle, reading, marked = [], [], 0
        # typeshed calls it one channel; waitress keeps a dict of them by descriptor.
        channels: Any = listener.active_channels
        for channel in list(channels.values()):
            if not isinstance(channel, Channel) or channel.will_close:
                continue
            if channel.total_outbufs_len:
                channel.waited += step
                # Both judged: too_slow starts the next window when one is over.
                late = self._too_slow(channel) | (channel.last_activity < cutoff)
                reading.append(channel)
            elif channel.request is not None:  # a request arriving
                late = (channel.request_started < cutoff
                        or channel.last_activity < idle_cutoff)
                idle.append(channel)
            elif not channel.requests:
                late = channel.last_activity < idle_cutoff
                idle.append(channel)
            else:
                late = False  # a request running: the app's own deadlines bound it
            if late and channel.total_outbufs_len:
                channel.abort()  # its socket may never be writable: close it here
                reading.remove(channel)
            elif late:
                channel.will_close = True
                marked += 1
        limit = adj.connection_limit
        held = len(listener._map) - marked  # type: ignore[attr-defined]
        if held >= limit:
            for channel in idle:
                if channel.last_activity < now - EVICT_AFTER and not channel.will_close:
                    channel.will_close = True
                    held -= 1
            waited = [each for each in reading if each.waited >= EVICT_AFTER]
            waited.sort(key=Channel.send_rate)
            for channel in waited[:max(0, held - limit + max(1, limit // HEADROOM))]:
                channel.abort()
                held -= 1
        self.held = held >= limit
        listener.pull_trigger()  # the loop closes the marked ones at once

    def _too_slow(self, channel: "Channel") -> bool:
        if not self._min_rate or channel.waited < self._window:
            return False
        slow = channel.send_rate() < self._min_rate
        channel.window_taken, channel.waited = channel.taken(), 0.0
        return slow


def listening(server: Server) -> list[tuple[str, int | str]]:
    """The (host, port) of each socket ``server`` listens on (waitress's ports are numeric
    strings; typeshed says int)."""
    if isinstance(server, MultiSocketServer):
        return list(server.effective_listen)
    return [(server.effective_host, server.effective_port)]  # type: ignore[attr-defined]


def socket_map(server: Server) -> Any:
    """The dispatchers by file descriptor (typeshed's stubs leave BaseWSGIServer's out)."""
    return server.map if isinstance(server, MultiSocketServer) else (
        server._map)  # type: ignore[attr-defined]


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
        # is; its channel is a Channel, the one class that uses this task.
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


class _Parser(HTTPRequestParser):
    """waitress's request parser, framing by RFC 9112:

    - a request with both Transfer-Encoding and Content-Length is answered, and then its
      connection is closed (section 6.1: a front end that took the Content-Length would
      read the rest as another request);
    - a chunked body is held to the limit by its decoded bytes, as a Content-Length body
      is (waitress counts the chunk-size lines too), its framing to eight times that;
    - an ``Expect: 100-continue`` request whose token ``may_continue`` refuses is taken
      as bodiless, to be answered at once (the app's 401), and its connection closed
      after the answer, its body unread (RFC 9110 10.1.1: a server that can decide from
      the headers sends the final status without waiting for the body)."""

    limit = 0  # the largest body accepted: one less than waitress's limit
    may_continue: Callable[[str | None], bool] | None = None

    def parse_header(self, header_plus: bytes) -> None:
        super().parse_header(header_plus)
        headers: Any = self.headers  # a dict in waitress; typeshed says Mapping
        if (self.expect_continue and self.may_continue is not None
                and not self.may_continue(headers.get("AUTHORIZATION"))):
            self.expect_continue = self.chunked = False
            self.body_rcv, self.content_length = None, 0  # waitress: complete at once
            headers["CONTENT_LENGTH"] = "0"
            self.connection_close = True
            headers["CONNECTION"] = "close"  # what waitress's Task reads
            return
        if self.chunked:
            if "CONTENT_LENGTH" in self.headers:
                self.connection_close = True
                headers["CONNECTION"] = "close"  # what waitress's Task reads
            self.limit = self.adj.max_request_body_size - 1
            self.adj = copy.copy(self.adj)  # this request's own, for a looser framing cap
            self.adj.max_request_body_size = 8 * self.limit + 65536

    def received(self, data: bytes) -> int:
        consumed: int = super().received(data)
        if (self.limit and self.error is None and self.body_rcv is not None
                and len(self.body_rcv) > self.limit):  # decoded bytes so far
            self.error = RequestEntityTooLarge(f"exceeds max_body of {self.limit + 1}")
            self.completed = True
        return consumed


class _Task(WSGITask):
    """waitress's task for the app's answers; a 429 pauses its connection (below), and a
    204 or 304 keeps it (waitress closes an HTTP/1.1 connection after any answer with no
    Content-Length, though these two have no body to delimit: RFC 9112 6.3)."""

    _bodiless = False  # building a 204 or 304's header, on a connection asked to stay

    def build_response_header(self) -> bytes:
        asked: dict[str, str] = self.request.headers  # type: ignore[attr-defined]
        self._bodiless = (not self.has_body and self.version == "1.1"
                          and not self.close_on_finish
                          and asked.get("CONNECTION", "").lower() != "close")
        try:
            header: bytes = super().build_response_header()
        finally:
            self._bodiless = False
        return header

    def set_close_on_finish(self) -> None:
        if not self._bodiless:  # waitress's "no Content-Length: close", for no body
            super().set_close_on_finish()

    def execute(self) -> None:
        super().execute()
        if self.status.startswith("429"):
            retry = next((value for name, value in self.response_headers
                          if name.lower() == "retry-after"), "1")
            self.channel.paused_until = time.time() + float(retry)  # type: ignore[attr-defined]


class Channel(HTTPChannel):
    """Waitress's channel, with its errors in the Error shape (JsonErrorTask), and:

    - a pipelined request is not run until the answer before it has been sent: it waits
      on no thread (``parked``) and the I/O loop hands it to the threads once the client
      has read that answer, so a client that pipelines and never reads holds one answer
      and no thread;
    - ``request_started``: when the request being received sent its first byte, for
      :class:`Upkeep`'s deadline;
    - ``100 Continue`` only for a request that passed the size check (one whose token
      is refused is answered at once: :class:`_Parser`);
    - ``sent``: the bytes sent to the client, for :class:`Upkeep`'s minimum rate;
    - a connection answered 429 (over the rate limit) is not read again until its
      ``Retry-After`` has passed, and one that pipelined requests past it is closed: a
      client that ignores the limit costs a request a second, not a request per answer."""

    task_class = _Task
    error_task_class = JsonErrorTask
    parser_class = _Parser
    on_refused: Callable[[str, str, int], None] | None = None
    parked = False
    request_started = 0.0
    paused_until = 0.0
    sent = 0  # bytes handed to the kernel for this connection
    window_taken = 0  # taken() when the current window of Upkeep's minimum rate began
    waited = 0.0  # seconds of that window its answer waited for the client

    def send(self, data: bytes, do_close: bool = True) -> int:
        sent: int = super().send(data, do_close)
        self.sent += sent
        return sent

    def taken(self) -> int:
        """Bytes the client has taken: those sent, less those the kernel still holds for
        it (SIOCOUTQ), which may be megabytes on a socket whose buffer grew."""
        try:
            queued: int = struct.unpack("i", fcntl.ioctl(
                self._fileno, termios.TIOCOUTQ, b"\0" * 4))[0]  # type: ignore[attr-defined]
        except (OSError, TypeError):  # closed, or not a TCP socket on Linux: all sent
            queued = 0
        return self.sent - queued

    def send_rate(self) -> float:
        """Bytes a second the client took over the current window's waiting (Upkeep)."""
        return (self.taken() - self.window_taken) / max(self.waited, 0.001)

    def abort(self) -> None:
        """Close with a reset (SO_LINGER 0, as nginx's ``reset_timedout_connection``), for
        a client that does not read: a plain close would leave what the kernel holds for
        it to be sent for as long as the client keeps reading a trickle, the client none
        the wiser."""
        with contextlib.suppress(OSError, AttributeError):  # AttributeError: closed
            self.socket.setsockopt(  # type: ignore[union-attr]
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.handle_close()

    def readable(self) -> bool:
        if self.paused_until and time.time() < self.paused_until:
            return False
        readable: bool = super().readable()
        return readable

    def received(self, data: bytes) -> bool:
        if self.request is None:
            self.request_started = time.time()  # the clock of waitress's last_activity
        done: bool = super().received(data)
        return done

    def service(self) -> None:
        if self.paused_until and time.time() < self.paused_until:  # pipelined past a 429
            # As waitress closes after an answer: once what is buffered is sent.
            with self.requests_lock:  # type: ignore[attr-defined]
                self.close_when_flushed = True
                for request in self.requests:
                    request.close()
                self.requests = []
            self.server.pull_trigger()
            return
        with self.outbuf_lock:  # the I/O thread may unpark it, and run it, at once
            park = self.parked = bool(self.total_outbufs_len) and self.connected
        if park:
            self.server.pull_trigger()
            return
        super().service()

    def handle_write(self) -> None:
        if not self.parked:
            super().handle_write()
            return
        # No task runs on a parked channel: flush as waitress does when none runs.
        self._flush_exception(self._flush_some)  # type: ignore[attr-defined]
        if self.will_close:
            self.handle_close()
        elif not self.total_outbufs_len:  # its answer sent: the next request may run
            self.parked = False
            self.server.add_task(self)  # type: ignore[arg-type]  # waitress passes channels

    def send_continue(self) -> None:
        # Waitress would invite the body of an 'Expect: 100-continue' request it has already
        # refused (a Content-Length over the limit), then read it up to the limit.
        # send_continue runs for a request being read: self.request is never None here.
        if self.request.error is None:  # type: ignore[union-attr]
            super().send_continue()
