"""One access line per request: client, method, path, status, duration, request id; never
the headers or the body. Text, or JSON lines for log shippers.

The lines are formatted like the logging module's lines but without its machinery (a
LogRecord, its formatting and handler locking cost as much as everything else the service
does per request), and written by one background thread every ``FLUSH_INTERVAL`` seconds
rather than one write per request: a write lets go of the GIL, and getting it back among
busy worker threads costs more than the request itself. As with nginx's ``access_log
buffer= flush=``, a ``kill -9`` loses at most the last interval's lines; a normal exit
writes them all. Probes (``quiet_paths``, and paths under ``quiet_prefixes``) are logged
only at ``log_level = debug``.

At most ``MAX_PENDING`` lines wait for the flusher (a few more, one per thread racing
past the check): while their destination does not take them (a host's handler on a
stderr nobody reads), further lines are dropped, counted by the events' ``dropped`` (the metrics),
and one warning says how many once a flush gets through. Lines that a
:class:`~plant_store.logs.LineQueue` refuses (``plant-store serve``'s stderr, stalled) are
counted the same way; the queue marks the gap in the log itself, and never makes the
flusher wait. A stop's flush (``flush_all``) waits at most ``DRAIN_TIMEOUT`` for a flush
stuck on its destination, then leaves it.

In the text format every field a client chose (path, method, address, request id) has its
control characters escaped as ``\\xNN``, so a request cannot forge or split a line.

Where the lines go: to ``stream`` when one is given; else through the ``plant_store.access``
logger, so a host application's handlers, filters and levels see them (the flusher thread,
not the request's, makes their LogRecords). When that logger's records would only reach the
handler :func:`plant_store.logs.configure` installed (``plant-store serve``, the WSGI entry
point), the lines are written to its stream directly, as before: the same lines, cheaper.
"""

import atexit
import collections
import contextlib
import logging
import threading
import time
import weakref
from typing import Any, TextIO

import falcon
import orjson

from plant_store.events import Events
from plant_store.http.request_id import RequestId
from plant_store.logs import (
    DRAIN_TIMEOUT,
    LOG_LEVELS,
    LineQueue,
    escape,
    iso_timestamp,
    own_stream,
    timestamp,
)
from plant_store.util import at_fork

FLUSH_INTERVAL = 0.05  # seconds; a small batch holds the GIL briefly, which keeps p99 down
MAX_PENDING = 10_000  # lines waiting for the flusher: some 4 MB, 2 s at 5,000 requests/s
LOGGER = logging.getLogger("plant_store.access")
log = logging.getLogger("plant_store.logs")
_LEVELS = {"INFO": logging.INFO, "DEBUG": logging.DEBUG}
_CODES: dict[Any, int] = {}  # a status as the app set it -> its code


class AccessLog:
    """The middleware that writes one access line per answer (and tells the metrics), in
    batches, off the request's thread."""

    def __init__(
        self, stream: TextIO | None, log_level: str, quiet_paths: frozenset[str],
        quiet_prefixes: tuple[str, ...] = (), log_format: str = "text",
        events: Events | None = None, max_pending: int = MAX_PENDING,
    ) -> None:
        """``events``: told every request's time, logged or not (``request``: the metrics
        count them), and of access lines dropped (``dropped``)."""
        self._json = log_format == "json"
        self._ids = RequestId()
        self._stream = stream
        self._lines: collections.deque[tuple[Any, ...]] = collections.deque()
        self._max_pending = max_pending
        self._dropped = 0  # lines dropped since the last flush, for want of room
        self._dropped_lock = threading.Lock()
        self._events = events if events is not None else Events()
        self._lock = threading.Lock()  # one flush at a time, so lines keep their order
        _live.add(self)
        _start_flusher()
        rank = LOG_LEVELS.index(log_level)
        self._info = rank <= LOG_LEVELS.index("info")
        self._debug = rank == 0
        self._quiet = quiet_paths
        self._quiet_prefixes = quiet_prefixes

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.request_id = self._ids.assign(req, resp)
        req.context.started = time.perf_counter()

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, succeeded: bool
    ) -> None:
        elapsed = time.perf_counter() - req.context.started
        self._events.request(req, resp, elapsed)
        # Probes are quiet, unless refused: a 401 there is someone guessing tokens.
        if (req.path in self._quiet or req.path.startswith(self._quiet_prefixes)) and (
                falcon.http_status_to_code(resp.status) < 400):
            if not self._debug:
                return
            level = "DEBUG"
        elif self._info:
            level = "INFO"
        else:
            return
        if len(self._lines) >= self._max_pending:  # the destination does not keep up
            with self._dropped_lock:
                self._dropped += 1
            return
        # The raw fields only, from the WSGI environ itself (Falcon's remote_addr, root_path
        # and status_code each cost more than the rest of this step); the flusher formats.
        env = req.env
        self._lines.append((
            time.time(), level, env.get("REMOTE_ADDR", "127.0.0.1"), req.method,
            env.get("SCRIPT_NAME", "") + req.path, resp.status, elapsed,
            req.context.request_id))  # deque.append is thread-safe: no lock here

    @staticmethod
    def _object(entry: tuple[Any, ...]) -> dict[str, Any]:
        """The line's fields, as the JSON format writes them."""
        now, level, remote_addr, method, path, status, elapsed, request_id = entry
        return {"time": iso_timestamp(now), "level": level, "logger": LOGGER.name,
                "remote_addr": remote_addr, "method": method, "path": path,
                "status": falcon.http_status_to_code(status),
                "duration_ms": round(elapsed * 1000, 3), "request_id": request_id}

    def _text(self, entries: list[tuple[Any, ...]]) -> str:
        """The lines of ``entries``, in the text format, formatted in one loop: the
        flusher's cost per line is the service's per request (half of it a call per line
        to a formatter and to the timestamp's cache, before this loop)."""
        out: list[str] = []
        append = out.append
        codes = _CODES
        last_millis, stamp = -1, ""
        for now, level, remote_addr, method, path, status, elapsed, request_id in entries:
            code = codes.get(status)
            if code is None:
                code = falcon.http_status_to_code(status)
                if len(codes) < 64:  # the app's own statuses: few
                    codes[status] = code
            # Every unsafe character but the backslash is unprintable, and isprintable()
            # costs the usual clean line less than a regex search would.
            chosen = remote_addr + method + path + request_id
            if not chosen.isprintable() or "\\" in chosen:
                remote_addr, method, path, request_id = (
                    escape(f) for f in (remote_addr, method, path, request_id))
            millis = int(now * 1000)  # timestamp()'s own cache key
            if millis != last_millis:
                last_millis, stamp = millis, timestamp(now)
            tenths = round(elapsed * 10000)  # of a millisecond; ints format faster than floats
            append(f"{stamp} {level} [plant_store.access] {remote_addr} {method} "
                   f"{path} {code} {tenths // 10}.{tenths % 10}ms {request_id}\n")
        return "".join(out)

    def _format(self, entries: list[tuple[Any, ...]]) -> str:
        if self._json:
            return "".join(orjson.dumps(self._object(e)).decode() + "\n" for e in entries)
        return self._text(entries)

    def flush(self, wait: float = -1) -> None:
        """Write the lines that wait; ``wait``: seconds to wait for a flush under way (one
        stuck on its destination, say) before giving up, -1 for as long as it takes."""
        if not self._lock.acquire(timeout=wait):
            return
        try:
            self._flush()
        finally:
            self._lock.release()
        with self._dropped_lock:
            dropped, self._dropped = self._dropped, 0
        if dropped:  # after a flush that got through: this line may too
            log.warning("%d access lines dropped: their destination took none for a while "
                        "(%d may wait)", dropped, self._max_pending)
            self._count_dropped(dropped)

    def _flush(self) -> None:
        lines = []
        with contextlib.suppress(IndexError):
            while True:
                lines.append(self._lines.popleft())
        if not lines:
            return
        stream = self._stream or own_stream(LOGGER)
        if stream is None:
            for entry in lines:
                # A host's filter or handler that raises ends neither the flusher nor
                # the other lines.
                with contextlib.suppress(Exception):
                    self._emit(entry)
            return
        if stream is not self._stream:  # the root's handler: its level still applies
            lines = [e for e in lines if LOGGER.isEnabledFor(_LEVELS[e[1]])]
        try:
            taken = stream.write(self._format(lines))
            stream.flush()
        except (OSError, ValueError):  # stderr closed or gone: nowhere left to log
            return
        if taken == 0 and lines and isinstance(stream, LineQueue):  # full: the queue says so
            self._count_dropped(len(lines))

    def _count_dropped(self, lines: int) -> None:
        with contextlib.suppress(Exception):  # the flusher outlives a failing count
            self._events.dropped(lines)

    def _emit(self, entry: tuple[Any, ...]) -> None:
        """One line as a LogRecord, made at the request's time, through the logger."""
        now, level, remote_addr, method, path, status, elapsed, request_id = entry
        levelno = _LEVELS[level]
        if not LOGGER.isEnabledFor(levelno):
            return
        args = (escape(remote_addr), escape(method), escape(path),
                falcon.http_status_to_code(status), elapsed * 1000, escape(request_id))
        record = LOGGER.makeRecord(LOGGER.name, levelno, __file__, 0, "%s %s %s %d %.1fms %s",
                                   args, None, extra={"access": self._object(entry)})
        record.created, record.msecs = now, now % 1 * 1000
        LOGGER.handle(record)


_live: "weakref.WeakSet[AccessLog]" = weakref.WeakSet()  # a dropped app leaves the set
_flusher_lock = threading.Lock()
_flusher: threading.Thread | None = None


@atexit.register
def flush_all() -> None:
    """Write every pending access line now (at a stop, and at exit), waiting for a flush
    under way at most DRAIN_TIMEOUT each."""
    for access in list(_live):
        access.flush(DRAIN_TIMEOUT)


def _flush_forever() -> None:
    while True:
        time.sleep(FLUSH_INTERVAL)
        with contextlib.suppress(Exception):  # the thread outlives any one bad flush
            flush_all()


def _start_flusher() -> None:
    global _flusher
    with _flusher_lock:
        if _flusher is None:
            _flusher = threading.Thread(target=_flush_forever, name="access-log", daemon=True)
            _flusher.start()


@at_fork.register
def _after_fork_in_child() -> None:
    """A forked worker (gunicorn --preload, say) has no flusher thread: start its own."""
    global _flusher, _flusher_lock
    _flusher, _flusher_lock = None, threading.Lock()
    if _live:
        _start_flusher()
