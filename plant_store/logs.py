"""Logging for the command line and the servers: one line per record on stderr, text or JSON.

Wherever the service runs (``plant-store serve``, the WSGI entry point under gunicorn or
uWSGI), it configures the root logger with one handler of its own, unless the host already
configured logging (the root logger has handlers): then the host keeps control, and the
access lines reach its handlers through the ``plant_store.access`` logger.

``plant-store serve`` and the WSGI entry point write their lines through a
:class:`LineQueue` (issue 42): a reader of
stderr that stops reading (a pipe nobody reads, a stalled log shipper) then costs at most
``QUEUE_BYTES`` of memory and lost lines, counted, never a request's thread, the server's
I/O loop, or a stop that waits on the pipe for good.
"""

import atexit
import contextlib
import errno
import logging
import os
import re
import select
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from typing import TextIO

import orjson

from plant_store.util import at_fork

FORMAT = "%(asctime)s %(levelname)s [%(name)s] %(message)s"
LOG_LEVELS = ("debug", "info", "warning", "error")  # the order ranks them
QUEUE_BYTES = 1 << 20  # log text that may wait for stderr: some 9,000 access lines
DRAIN_TIMEOUT = 2.0  # seconds a stop gives stderr to take the lines that wait
GONE = frozenset({errno.EBADF, errno.EPIPE})  # a descriptor closed, or its reader gone
_second: tuple[int, str] = (-1, "")  # a second and its text
_last: tuple[int, str] = (-1, "")  # a millisecond and its text: lines come in bursts
_MILLIS = [f"{ms:03d}" for ms in range(1000)]  # a lookup is cheaper than a format spec


def timestamp(now: float) -> str:
    """``2026-11-22 21:05:51,123`` in local time."""
    global _second, _last
    millis = int(now * 1000)
    known_millis, text = _last
    if known_millis == millis:
        return text
    second, rest = divmod(millis, 1000)
    known, second_text = _second
    if known != second:
        second_text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
        _second = (second, second_text)  # one assignment, so threads never see a torn pair
    text = f"{second_text},{_MILLIS[rest]}"
    _last = (millis, text)
    return text


def iso_timestamp(now: float) -> str:
    """``2026-11-22T21:05:51.123Z``: UTC, for machines."""
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
    return f"{seconds}.{int(now % 1 * 1000):03d}Z"


# What a client or a subscriber could use to end a text line early or rewrite a terminal
# (C0, DEL, C1, and the line and paragraph separators that str.splitlines also breaks at);
# the backslash too, so that an escape in a line always stands for the character it names.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\\]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code == 0x5C:  # the backslash
        return "\\\\"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str) -> str:
    """``text`` safe to put in one log line: every unsafe character as an escape."""
    return _UNSAFE.sub(_escape, text)


class TextFormatter(logging.Formatter):
    """The text log line: ``logging``'s format with the service's timestamps."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return timestamp(record.created)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, the same keys as the JSON access lines where they apply;
    an access line's record (its ``access`` attribute) gives that line's very object."""

    def format(self, record: logging.LogRecord) -> str:
        access = getattr(record, "access", None)
        if access is not None:
            return orjson.dumps(access).decode()
        entry = {"time": iso_timestamp(record.created), "level": record.levelname,
                 "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else TextFormatter(FORMAT)


class LineQueue:
    """Log text on its way to a file descriptor (stderr), written there by a thread of its
    own, so that a reader that stops reading stalls that thread only: a request's thread,
    the server's I/O loop or a stop that logs never waits for the descriptor. At most
    ``limit`` bytes wait; a write beyond that is dropped whole, and its lines counted. The
    output marks where such a gap begins, and says how many lines it lost once text is
    taken again, or at :meth:`drain`. A write the descriptor fails for a while (a full
    disk) loses its lines, counted and said as a gap's; only a descriptor closed, or whose
    reader is gone, ends the writing; a non-blocking one that is full is waited for, as a
    blocking one is.

    Invariants: :meth:`write` never waits for the descriptor (the lock is held to queue or
    to take text, never across an ``os.write``); only the writer thread writes to the
    descriptor, each write's text whole and in the order queued, in whole lines of at most
    PIPE_BUF bytes a write (:func:`pieces`); the bytes waiting, those
    being written included, never pass ``limit`` but for the two lines marking a gap.
    """

    def __init__(self, fd: int, line_formatter: logging.Formatter,
                 limit: int = QUEUE_BYTES) -> None:
        self._fd, self._formatter, self._limit = fd, line_formatter, limit
        self._chunks: list[bytes] = []
        self._waiting = 0  # bytes queued or being written
        self._dropped = 0  # lines dropped since the gap began; 0: no gap
        self._stuck = False  # a drain timed out, and nothing was written since
        self._gone = False  # the descriptor is closed or its reader gone: nowhere to log
        self._start()
        _queues.add(self)

    def _start(self) -> None:
        """A new lock, and no writer thread until text is queued: at start, and in a forked
        child (a granian or gunicorn worker), where the parent's thread is gone and its lock
        may be held; the child leaves the parent's waiting lines to the parent, which writes
        them. A process that logs nothing starts no thread (a pre-fork server's master that
        imported the WSGI entry point: tests/integration/test_lazy_app_live.py)."""
        self._chunks, self._waiting = [], 0
        self._cond = threading.Condition(threading.Lock())
        self._writing = False  # the writer thread started, in this process

    def _queue(self, data: bytes) -> None:
        self._chunks.append(data)
        self._waiting += len(data)
        if not self._writing:  # under the lock: one writer
            self._writing = True
            threading.Thread(target=self._write_forever, name="log-writer",
                             daemon=True).start()
        self._cond.notify_all()

    def write(self, text: str) -> int:
        """Queue ``text``, whole lines; the characters taken, 0 when it was dropped."""
        data = text.encode("utf-8", "backslashreplace")  # as Python's stderr encodes
        with self._cond:
            if self._gone:
                return 0
            if self._waiting + len(data) > self._limit:
                if not self._dropped:
                    self._queue(self._notice(
                        f"log lines dropped from here on: stderr is not taking them (the "
                        f"{self._limit} bytes that may wait for it are waiting)"))
                self._dropped += text.count("\n") or 1
                return 0
            self._close_gap()
            self._queue(data)
        return len(text)

    def flush(self) -> None:
        """Nothing: the writer thread writes (see :meth:`drain`)."""

    def drain(self, timeout: float = DRAIN_TIMEOUT) -> bool:
        """Wait up to ``timeout`` seconds for the lines queued to be written, a gap's count
        too; whether they were. A descriptor that took nothing during a whole drain is not
        waited for again until it takes something."""
        with self._cond:
            self._close_gap()
            if not self._stuck:
                self._stuck = not self._cond.wait_for(
                    lambda: self._waiting == 0 or self._gone, timeout)
            return self._waiting == 0

    def _close_gap(self) -> None:
        if self._dropped:
            self._queue(self._notice(f"{self._dropped} log lines were dropped: stderr did "
                                     "not take them in time"))
            self._dropped = 0

    def _notice(self, message: str) -> bytes:
        record = logging.LogRecord(__name__, logging.WARNING, __file__, 0, message, None, None)
        return (self._formatter.format(record) + "\n").encode()

    def _write_forever(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._chunks)
                data, self._chunks = b"".join(self._chunks), []
            gone, lost = False, 0
            for piece in pieces(data):
                try:
                    self._write(piece)
                except OSError as exc:
                    if exc.errno in GONE:  # closed, or its reader gone: nowhere left to log
                        gone = True
                        break
                    lost += piece.count(b"\n")  # a full disk, say: the next may get through
            with self._cond:
                self._waiting -= len(data)
                self._stuck = False
                self._gone |= gone
                self._dropped += lost  # said as a gap's lines are, with the next write
                self._cond.notify_all()

    def _write(self, piece: bytes) -> None:
        view = memoryview(piece)
        while view:
            try:
                view = view[os.write(self._fd, view):]
            except BlockingIOError:  # a non-blocking descriptor, full: as a blocking one
                select.select([], [self._fd], [])


def pieces(data: bytes, size: int = select.PIPE_BUF) -> Iterator[bytes]:
    """``data`` in pieces of whole lines, each of at most ``size`` bytes but for a longer
    line, alone: a write of at most PIPE_BUF bytes to a pipe is one, never interleaved with
    another process's, and the workers of a pre-fork server share their stderr (one write
    of all that waited tore lines where a stalled reader came back: the hostile pass on
    issue 52, 5 of 20,746 lines under gunicorn with two workers)."""
    start, end = 0, len(data)
    while end - start > size:
        cut = data.rfind(b"\n", start, start + size)
        if cut < 0:  # a line longer than size: alone
            cut = data.find(b"\n", start + size)
            if cut < 0:
                break
        yield data[start:cut + 1]
        start = cut + 1
    if start < end:
        yield data[start:]


_own: logging.StreamHandler[TextIO | LineQueue] | None = None  # the handler configure() installed
_queues: "weakref.WeakSet[LineQueue]" = weakref.WeakSet()


@at_fork.register
def _after_fork_in_child() -> None:
    for queue in list(_queues):
        queue._start()


def configure(level: str, log_format: str = "text", queued: bool = False) -> None:
    """Every record, one line each, on stderr, from ``level`` up; through a
    :class:`LineQueue` when ``queued`` (a server: see the module) and stderr has a file
    descriptor (not a test's StringIO)."""
    global _own
    line_formatter = formatter(log_format)
    stream: TextIO | LineQueue = sys.stderr
    if queued:
        with contextlib.suppress(AttributeError, OSError):  # UnsupportedOperation
            stream = LineQueue(sys.stderr.fileno(), line_formatter)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(line_formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    _own = handler


@atexit.register  # before the access log's (plant_store.http.access_log), so run after it
def drain() -> None:
    """Give stderr the lines :func:`configure`'s queue holds, within DRAIN_TIMEOUT."""
    own = _own
    if own is not None and isinstance(own.stream, LineQueue):
        own.stream.drain()


def configure_unless_configured(level: str, log_format: str = "text",
                                queued: bool = True) -> bool:
    """:func:`configure`, unless the root logger has handlers already (a host application,
    gunicorn's ``--log-config``): those keep control. Whether it configured. Queued as
    ``plant-store serve`` is, unless told not to (a process that must start no thread: one
    uWSGI forks its workers from): the WSGI entry point's workers share one stderr, and
    each access flush written to it at once tore lines between them where a slow reader
    took the pipe's text in pieces, and stalled the flusher, uncounted, while the reader
    did not read (the hostile pass on issue 52's third round)."""
    if logging.getLogger().handlers:
        return False
    configure(level, log_format, queued=queued)
    return True


def own_stream(logger: logging.Logger) -> TextIO | LineQueue | None:
    """The stream of :func:`configure`'s handler when it is the only place ``logger``'s
    records go, with no filter on the way: lines may then be written to it directly, without
    a LogRecord each (see :mod:`plant_store.http.access_log`). None otherwise."""
    node: logging.Logger | None = logger
    while node is not None:
        if node.filters:
            return None
        if node.parent is None:  # the root
            own = _own
            if own is None or node.handlers != [own] or own.filters:
                return None
            return own.stream
        if node.handlers or not node.propagate:
            return None
        node = node.parent
    return None


class Throttle:
    """At most one line per ``interval`` seconds for a failure that repeats, saying how many
    were held back: a full disk fails every request, and its log must not fill a disk too."""

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._next = 0.0
        self._held = 0
        self._lock = threading.Lock()

    def error(self, logger: logging.Logger, message: str, *args: object) -> None:
        self.log(logger, logging.ERROR, message, *args)

    def log(self, logger: logging.Logger, level: int, message: str, *args: object) -> None:
        now = time.monotonic()
        with self._lock:
            if now < self._next:
                self._held += 1
                return
            held, self._held, self._next = self._held, 0, now + self._interval
        if held:
            message += f" ({held} more in the last {self._interval:g} s were not logged)"
        logger.log(level, message, *args)
