"""The upkeep of a granian worker's connections, done from outside granian, for what it
does not do itself (the hostile pass on issue 49): hyper closes no connection that has
sent nothing (its header deadline starts at the first byte), holds an answer its client
does not read for as long as the client stays, and takes as many connections as the
process may open descriptors. Waitress does all of this in its upkeep
(:class:`plant_store.serving.waitress_adapter.Upkeep`); this does the same from the
kernel's side of each socket, once a second, in a thread of the worker:

- the worker's connections are its descriptors that are TCP sockets connected to the
  service's port (``/proc/self/fd``); each is read with ``TCP_INFO`` (bytes received, bytes
  the client acknowledged, milliseconds since data last moved each way) and ``SIOCOUTQ``
  (bytes of an answer the client has not yet taken);
- a connection is closed by ``shutdown()`` on a duplicate of its descriptor (granian's own
  descriptor stays granian's to close: hyper sees the connection end and drops it, with
  whatever answer it held), with ``SO_LINGER`` 0 where an answer is unsent, so that the
  kernel drops the unsent bytes too (a reset, as waitress's ``abort``);
- an answer must move: one whose client took no byte of it for ``request_timeout``
  seconds, or that moved slower than ``min_rate`` bytes a second over ``window`` seconds
  of waiting (0: any rate), is reset;
- a connection that never sent a byte is closed ``request_timeout`` seconds after it was
  made, and one where nothing moved either way for ``channel_timeout`` seconds is closed
  too, unless it is busy: its client spoke last (a request arriving, or running) and a
  call of the app in flight began since its last byte, or every request thread is busy
  (the request may wait for one); so a running request is never cut;
- at ``limit`` connections (granian takes no more: its backpressure), every connection
  quiet for EVICT_AFTER seconds and not busy (as above) is closed so that new clients
  get in (one that has sent nothing, after UNREAD_AFTER while clients wait: an honest
  client sends as it connects), and while clients wait the sweeps come every RESWEEP
  seconds (granian takes the next connections from the kernel's queue, which may have
  waited there as long); if that
  frees fewer than one slot in HEADROOM while clients wait in the listening socket's
  queue (``TCP_INFO`` of a listener: its queue's length), the answers that waited
  UNREAD_AFTER seconds or more are reset too, as many as clients wait (one slot in
  HEADROOM at least), the slowest readers first: the slowest,
  not a cap per address (behind a proxy every connection has its address); a client
  that reads takes what the kernel sends at once, so its answer waits little; and none
  while nobody waits (a slow download is cut only for a client that would not get in);
- :meth:`unready` says so while every slot stayed held after all that and clients wait
  in the queue (the probe port's ``/ready``).

Invariant: the upkeep never closes a descriptor of granian's (only its own duplicates),
and never acts on a socket that is not a connection to ``port`` (the probe port's, the
database's and the webhooks' sockets are other ports or peers). A descriptor reused
between the listing and the duplicate is read as what it then is. Linux only (``TCP_INFO``'s
layout is Linux's, read as in linux/tcp.h since 4.6); elsewhere the upkeep does nothing
and says so at start.
"""

import fcntl
import logging
import os
import socket
import struct
import sys
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("plant_store.server")

INTERVAL = 1.0  # seconds between sweeps
RESWEEP = 0.05  # seconds to the next sweep while clients wait at the limit
EVICT_AFTER = 1.0  # seconds a connection may sit idle at the limit
UNREAD_AFTER = 0.25  # seconds an answer may wait at the limit (a reader's window is open)
HEADROOM = 20  # at the limit, the upkeep frees one connection slot in this many
SLACK = 0.05  # seconds between a request's last byte and the app's call, at most
SIOCOUTQ = termios.TIOCOUTQ  # the same request number for a TCP socket: unacknowledged bytes
_INFO = struct.Struct("=B7x16x20x4I60x2Q8xI")  # linux/tcp.h struct tcp_info, up to notsent
_LINGER_NOW = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: a close resets
_QUEUE = struct.Struct("=B23xI")  # tcpi_state, tcpi_unacked (a listener: its queue)
_LISTEN = 10  # TCP_LISTEN in tcpi_state


@dataclass
class Seen:
    """One connection as a sweep read it (times in seconds)."""

    sent_ago: float  # since data last went to the client
    received_ago: float  # since data last came from it
    received: int  # bytes in all
    acked: int  # bytes of answers the client has taken
    queued: int  # bytes sent to the socket the client has not taken

    @property
    def quiet(self) -> float:
        return min(self.sent_ago, self.received_ago)

    @property
    def between_requests(self) -> bool:
        """Nothing came since the server last spoke (or nothing came at all). The kernel
        counts in milliseconds or coarser, and most answers leave within the
        millisecond their request arrived: a tie is read as the server's turn, once it
        has sent anything (before, the clock of its last send is the connection's start)."""
        if self.received == 0:
            return True
        return bool(self.acked or self.queued) and self.sent_ago <= self.received_ago


@dataclass
class _Answer:
    """What the upkeep remembers of an answer its client is taking."""

    acked: int  # the client's taken bytes when they last moved
    moved: float  # when they last moved
    window_acked: int  # at the start of the current window
    waited: float = 0.0  # seconds of the current window


def read(sock: socket.socket) -> Seen:
    """The kernel's view of one connection."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _INFO.size)
    _state, sent, _, received_ago, _, acked, received, _notsent = _INFO.unpack(info)
    queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), SIOCOUTQ, b"\0" * 4))[0]
    return Seen(sent / 1000, received_ago / 1000, received, acked, queued)


def connections(port: int) -> tuple[dict[int, socket.socket], int]:
    """This process's connections to ``port``, as duplicates of their descriptors (the
    caller closes them), by socket inode (a connection's identity while it lives); and how
    many connections wait in its listening sockets' queues for the server to take them."""
    found: dict[int, socket.socket] = {}
    waiting = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{name}")  # socket:[INODE]
            if not link.startswith("socket:"):
                continue
            inode = int(link[8:-1])
            if inode in found:  # a number listed may since be one of our copies
                continue
            copy = os.dup(int(name))
        except (OSError, ValueError):
            continue  # closed since the listing
        try:
            sock = socket.socket(fileno=copy)
        except OSError:
            os.close(copy)
            continue
        try:
            if (sock.type == socket.SOCK_STREAM and sock.family in (socket.AF_INET,
                                                                    socket.AF_INET6)
                    and sock.getsockname()[1] == port):
                try:
                    sock.getpeername()
                except OSError:  # no peer: a listener, or a connection ending
                    waiting += _queue_length(sock)
                else:
                    found[inode] = sock
                    continue
        except OSError:
            pass  # a socket ending
        sock.close()
    return found, waiting


def _queue_length(sock: socket.socket) -> int:
    """A listening socket's accept queue (Linux reports it as tcpi_unacked); 0 for any
    other socket."""
    state, queued = _QUEUE.unpack(
        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _QUEUE.size))
    return int(queued) if state == _LISTEN else 0


def close(sock: socket.socket, reset: bool) -> None:
    """End a connection granian holds: it sees the end and drops the connection."""
    try:
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_NOW)
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # ended meanwhile


class ConnectionUpkeep:
    """The rules of the module's docstring, for one worker's connections to ``port``."""

    def __init__(self, port: int, *, request_timeout: float, channel_timeout: float,
                 limit: int, min_rate: int, window: float,
                 running: Callable[[], tuple[list[float], bool]]) -> None:
        self._port, self._limit = port, limit
        self._request_timeout, self._channel_timeout = request_timeout, channel_timeout
        self._min_rate, self._window = min_rate, window
        # The app's calls in flight: how long each has run, and whether every thread is
        # busy (then a request may wait for one, its connection quiet).
        self._running = running
        self._answers: dict[int, _Answer] = {}
        self._last = 0.0
        self.held = False
        self._crowded = False  # at the limit with clients waiting, before letting any go
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not sys.platform.startswith("linux"):
            log.warning("connection upkeep needs Linux: idle and unread connections stay")
            return
        self._thread = threading.Thread(target=self._run, name="plant-store-upkeep",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def unready(self) -> str | None:
        """Why new clients wait, or None."""
        if not self.held:
            return None
        return (f"Every connection slot ({self._limit}) is held by clients that are "
                "neither idle nor slow enough to let go: new clients wait.")

    def _run(self) -> None:
        pause = INTERVAL
        while not self._stop.wait(pause):
            try:
                closed = self.sweep(time.monotonic())
            except Exception:  # never the end of the upkeep: the next sweep may do
                log.exception("connection upkeep failed a sweep")
                closed = []
            # Granian takes as many from its queue as were let go, and those may have
            # waited there idle as long; while clients wait, the next sweep comes soon.
            crowded = self._crowded or any(why.endswith("limit") for _, why in closed)
            pause = RESWEEP if crowded else INTERVAL

    def sweep(self, now: float) -> list[tuple[int, str]]:
        """One pass of the rules; what it closed, each as (inode, why)."""
        step, self._last = (now - self._last if self._last else 0.0), now
        socks, waiting = connections(self._port)
        closed: list[tuple[int, str]] = []
        try:
            idle, reading = [], []
            ages, saturated = self._running()
            for inode, sock in socks.items():
                try:
                    seen = read(sock)
                except OSError:
                    continue
                busy = not seen.between_requests and (saturated or any(
                    age <= seen.received_ago + SLACK for age in ages))
                why = (self._judge_answer(inode, seen, now, step) if seen.queued
                       else self._judge_quiet(seen, busy))
                if why:
                    close(sock, reset=bool(seen.queued))
                    closed.append((inode, why))
                elif seen.queued:
                    reading.append((inode, seen))
                elif not busy:
                    idle.append((inode, seen))
            for gone in self._answers.keys() - {inode for inode, _ in reading}:
                del self._answers[gone]
            held = len(socks) - len(closed)
            self._crowded = held >= self._limit and waiting > 0
            if held >= self._limit:
                held = self._evict(socks, idle, reading, held, closed, waiting)
            self.held = held >= self._limit and waiting > 0
        finally:
            for sock in socks.values():
                sock.close()  # the duplicates only
        return closed

    def _judge_answer(self, inode: int, seen: Seen, now: float, step: float) -> str | None:
        answer = self._answers.get(inode)
        if answer is None:
            answer = self._answers[inode] = _Answer(seen.acked, now, seen.acked)
        elif seen.acked != answer.acked:
            answer.acked, answer.moved = seen.acked, now
        answer.waited += step
        if now - answer.moved >= self._request_timeout:
            return "answer unread"
        if self._min_rate and answer.waited >= self._window:
            rate = (seen.acked - answer.window_acked) / answer.waited
            answer.window_acked, answer.waited = seen.acked, 0.0
            if rate < self._min_rate:
                return "answer read too slowly"
        return None

    def _judge_quiet(self, seen: Seen, busy: bool) -> str | None:
        """``busy``: a request of the app may be this connection's (its client spoke last,
        and a call in flight began since, or one waits for a thread)."""
        if seen.received == 0 and seen.received_ago >= self._request_timeout:
            return "sent nothing"
        if seen.quiet < self._channel_timeout or busy:
            return None
        return "idle"

    def _evict(self, socks: dict[int, socket.socket], idle: list[tuple[int, Seen]],
               reading: list[tuple[int, Seen]], held: int, closed: list[tuple[int, str]],
               waiting: int) -> int:
        for inode, seen in idle:
            silent = seen.received == 0 and waiting  # a client sends as it connects
            if seen.quiet >= (UNREAD_AFTER if silent else EVICT_AFTER):
                close(socks[inode], reset=False)
                closed.append((inode, "idle at the limit"))
                held -= 1
        waited = [(inode, seen) for inode, seen in reading
                  if waiting and self._answers[inode].waited >= UNREAD_AFTER]
        waited.sort(key=lambda item: self._rate(*item))
        room = max(held - self._limit + max(1, self._limit // HEADROOM), waiting)
        for inode, _ in waited[:room]:
            close(socks[inode], reset=True)
            closed.append((inode, "slowest reader at the limit"))
            held -= 1
        return held

    def _rate(self, inode: int, seen: Seen) -> float:
        answer = self._answers[inode]
        return (seen.acked - answer.window_acked) / max(answer.waited, 1e-9)
