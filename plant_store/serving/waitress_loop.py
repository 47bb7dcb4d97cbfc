"""Running a waitress server ourselves: its I/O loop until SIGTERM or SIGINT and then a
drain (:func:`run_until_stopped`), or in a thread of its own (:class:`Background`, the
probe port), and its task threads, with a lane of their own for some paths
(:class:`LaneDispatcher`) and its queue warning throttled.

The server, its channels and every private name of waitress are
:mod:`plant_store.serving.waitress_adapter`'s; this relies on these internals, each read
in waitress 3.0.2 and checked by tests/integration/test_waitress_pins.py:

- ``ThreadedTaskDispatcher.add_task`` is given the channel, whose ``requests[0]`` is the
  parsed request: the lane is chosen by its method and path before it waits for a thread,
  and no public hook sees a request that early.
- ``ThreadedTaskDispatcher.queue_logger``: its "Task queue depth" warning, made by the I/O
  thread for nearly every request under load (see :class:`_QueueLog`); a filter on the
  ``waitress.queue`` logger would still make a record each time, for every server.
- A drain in place of ``run()`` (:func:`run_until_stopped`): ``wasyncore.loop`` and
  ``close_all``, the server's socket map (``waitress_adapter.socket_map``), each channel's
  ``requests``, ``total_outbufs_len`` and ``handle_close``, and the listener's
  ``accepting``.
"""

import contextlib
import functools
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from waitress import wasyncore
from waitress.channel import HTTPChannel
from waitress.server import BaseWSGIServer
from waitress.task import Task, ThreadedTaskDispatcher
from waitress.utilities import queue_logger

from plant_store.logs import Throttle
from plant_store.serving import waitress_adapter
from plant_store.serving.waitress_adapter import Server

log = logging.getLogger("plant_store.waitress_adapter")  # the name users filter on
QUEUE_WARNING_EVERY = 10.0  # seconds: the most often waitress's queue warning is logged


class Background:
    """A waitress server run by a thread of its own until ``stop()`` (the probe port)."""

    def __init__(self, server: Server) -> None:
        self._server = server
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="plant-store-probes",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        socket_map = waitress_adapter.socket_map(self._server)
        while not self._stopping.is_set():
            wasyncore.loop(timeout=0.2, map=socket_map, use_poll=True, count=1)
        _drain(self._server, socket_map, grace=2.0)

    def stop(self) -> None:
        """Take no more connections, answer those in flight (at most 2 s), close: the
        listening socket too, in this process (a gunicorn master keeps its own)."""
        self._stopping.set()
        self._thread.join(3)


def serve_in_thread(app: Callable[..., Iterable[bytes]], listener: socket.socket,
                    threads: int, request_timeout: float, **settings: Any) -> Background:
    """``app`` on waitress, on ``listener``, with threads of its own, our channel and
    upkeep (as :func:`~plant_store.serving.waitress_adapter.create_server`), its loop in a
    thread of its own."""
    dispatcher = throttled_dispatcher(threads)
    server = waitress_adapter.create_server(
        app, dispatcher, max_body_size=0, request_timeout=request_timeout, sockets=[listener],
        threads=threads, ident="plant-store", clear_untrusted_proxy_headers=False,
        cleanup_interval=1, **settings)
    return Background(server)


def run_until_stopped(server: Server, grace: float) -> None:
    """Serve until KeyboardInterrupt, then drain: take no new connection or request, close
    each connection as soon as nothing of its own is in flight, and keep sending answers,
    all connections at once, until none is left or ``grace`` seconds have passed.

    In place of waitress's ``run()``, which on the signal stops its I/O loop and waits for
    the workers: with ``send_bytes`` an answer waits in its connection's buffer for that
    loop to send it, so answers finished after the signal would never leave (a
    MultiSocketServer even closes every connection first). One client that cannot take
    its answer (a full window, a reset) holds back no other: the loop serves them all."""
    socket_map = waitress_adapter.socket_map(server)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            wasyncore.loop(timeout=server.adj.asyncore_loop_timeout, map=socket_map,
                           use_poll=True)
    except Exception as exc:  # never a silent exit: say why, answer what is in flight
        log.critical("waitress's I/O loop failed; stopping", exc_info=True)
        failed: Exception | None = exc
    else:
        failed = None
    _drain(server, socket_map, grace)
    if failed is not None:
        raise SystemExit(f"plant-store: error: the server's I/O loop failed: {failed!r}")


FRESH = 0.5  # seconds after it was accepted that a connection is given to send a request


def _drain(server: Server, socket_map: Any, grace: float) -> None:
    """Take no new connection, close each connection as soon as nothing of its own is in
    flight (one accepted less than FRESH seconds ago is given that long to send its
    request: a probe under gunicorn was reset by a worker that ended just after taking
    it), and keep sending answers, all connections at once, until none is left or
    ``grace`` seconds have passed; then close every socket of ``socket_map``."""
    loop = functools.partial(wasyncore.loop, map=socket_map, use_poll=True)
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
            elif time.time() - channel.creation_time < FRESH:
                busy = True  # accepted a moment ago: its request is on its way
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


def throttled_dispatcher(threads: int) -> ThreadedTaskDispatcher:
    """waitress's pool of ``threads`` task threads, its queue warning throttled: every pool
    of ours (the probe lane and the probe port's pool too: an anonymous client polling
    ``/ready`` made thousands of lines a second there, the hostile pass on issue 52)."""
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.queue_logger = _QueueLog()  # type: ignore[assignment]  # waitress calls warning()
    dispatcher.set_thread_count(threads)
    return dispatcher


class LaneDispatcher(ThreadedTaskDispatcher):
    """waitress's pool of ``threads``, plus ``lane_threads`` of their own for the GET and
    HEAD requests to ``lane_paths``, which serve nothing else (plant_store.serving.probes).
    The choice is made per request: waitress hands the channel over again for each
    pipelined request."""

    def __init__(self, threads: int, lane_paths: Iterable[str], lane_threads: int) -> None:
        super().__init__()
        self.queue_logger = _QueueLog()  # type: ignore[assignment]  # waitress calls warning()
        self.set_thread_count(threads)
        self._paths = frozenset(lane_paths)
        self._lane = throttled_dispatcher(lane_threads)

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
