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

One record per request: the request's thread sets the request id on the answer
(:mod:`plant_store.http.request_id`) and appends the request's raw fields to a deque
(time, client address, method, mount point, path, status, duration, request id, route
template: :data:`plant_store.events.Answered`), and that is all it does for its line and
its metrics. The flusher drains the deque every ``FLUSH_INTERVAL``, and a scrape of the
metrics first (it is handed :meth:`AccessLog.drain` when the app is built): a drain hands
the records to the events at once (``requests``: the metrics count them), then decides
each line's level, or that it is quiet, and queues the lines to write. A request's thread
drains only once ``batch`` records wait (BATCH, 10,000: the flusher starved), so memory
stays bounded; draining there every 256 requests made granian's p99 grow with the run, 5
to 50 ms over 1.3 million creates (while 3.7 ms without), and cost a fifth of the
throughput at every request (bench/README.rst, issue 52).

Invariants:

- Every request's record is drained exactly once (drains are one at a time, and each
  pops the records it found waiting), and its line queued (or dropped, counted) and its
  count made in that one drain.
- A drain and its counting hold one lock (``_draining``), writing holds another
  (``_writing``): a drain, so a count, never waits for a stream that does not take its
  lines; a scrape, which drains first, waits for a drain under way, so it counts every
  request answered before it.
- At most ``batch`` records wait to be drained (a few more, one per thread racing past the
  check), and at most ``max_pending`` lines to be written.
- ``count_each`` (several processes, the metrics in files): each request is told to the
  events on its own thread as it is answered, and drains tell them of none, so each count
  reaches the files at once, whichever worker a scrape reaches; a worker that exits
  drains (its lines) at exit (``flush_all``, atexit, and the servers' own stops).
- Lines are written in the order their requests were answered (drains and writes are each
  one at a time, and a drain queues its lines in its records' order).

At most ``MAX_PENDING`` lines wait for the flusher: while their destination does not take
them (a host's handler on a stderr nobody reads), further lines are dropped, counted by
the events' ``dropped`` (the metrics), and one warning says how many once a flush gets
through. Lines that a :class:`~plant_store.logs.LineQueue` refuses (``plant-store
serve``'s stderr, stalled) are counted the same way; the queue marks the gap in the log
itself, and never makes the flusher wait. A stop's flush (``flush_all``) waits at most
``DRAIN_TIMEOUT`` for a flush stuck on its destination, then leaves it.

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
from collections.abc import Iterable
from itertools import repeat, starmap
from operator import add, itemgetter, mul
from time import perf_counter
from typing import Any, TextIO

import falcon
import orjson

from plant_store.events import Answered, Events
from plant_store.http.request_id import ENV_KEY, HEADER, SANE, RequestId
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
BATCH = 10_000  # requests' records waiting to be drained, at most: some 2 MB
ADDRESSES_KEPT = 1024  # client addresses a record shares with earlier ones
LOGGER = logging.getLogger("plant_store.access")
log = logging.getLogger("plant_store.logs")
_LEVELS = {"INFO": logging.INFO, "DEBUG": logging.DEBUG}
_CODES: dict[Any, int] = {}  # a status as the app set it -> its code
# Of an Answered record (plant_store.events.Answered), and of a queued (level, record) line
_NOW, _FIELDS, _PATH, _ELAPSED, _ID = (
    itemgetter(0), itemgetter(1, 2, 3, 4, 5), itemgetter(4), itemgetter(6), itemgetter(7))
_MIDDLE = [(at, itemgetter(at)) for at in range(1, 6)]  # the fields of _FIELDS, each


class AccessLog:
    """The middleware that writes one access line per answer (and tells the metrics), in
    batches, off the request's thread."""

    def __init__(
        self, stream: TextIO | None, log_level: str, quiet_paths: frozenset[str],
        quiet_prefixes: tuple[str, ...] = (), log_format: str = "text",
        events: Events | None = None, max_pending: int = MAX_PENDING, batch: int = BATCH,
        count_each: bool = False,
    ) -> None:
        """``events``: told every request answered, logged or not (``requests``: the
        metrics count them), and of access lines dropped (``dropped``); ``batch``: how many
        requests' records may wait to be drained before a request's thread drains them;
        ``count_each``: the events are told of each request on its thread as it is
        answered (the metrics of several processes), not when its record is drained."""
        self._json = log_format == "json"
        self._ids = RequestId()
        self._addresses: dict[str, str] = {}  # each client address, once (ADDRESSES_KEPT)
        self._stream = stream
        self._answered: collections.deque[Answered] = collections.deque()
        self._batch = batch
        self._count_each = count_each
        # Lines to write, in runs of one level (a drain's records, usually one run):
        # (level, records). Lines queued and lines taken to write are each counted by the
        # one lock that changes them (_draining, _writing), so their difference, the lines
        # waiting, needs neither to wait for the other.
        self._lines: collections.deque[tuple[str, list[Answered]]] = collections.deque()
        self._queued = self._taken = 0
        self._max_pending = max_pending
        self._dropped = 0  # lines dropped since the last flush, for want of room
        self._dropped_lock = threading.Lock()
        self._events = events if events is not None else Events()
        self._draining = threading.Lock()  # a drain and its count: never waits on a stream
        self._writing = threading.Lock()  # one write at a time, so lines keep their order
        _live.add(self)
        _start_flusher()
        rank = LOG_LEVELS.index(log_level)
        self._info = rank <= LOG_LEVELS.index("info")
        self._debug = rank == 0
        self._quiet = quiet_paths
        self._quiet_prefixes = quiet_prefixes

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.started = perf_counter()

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, succeeded: bool
    ) -> None:
        answered_at = perf_counter()
        elapsed = answered_at - req.context.started
        env, ids = req.env, self._ids
        # The request id (RequestId.assign's steps, inline: the answer's headers are sent
        # after this, whatever answered).
        given = env.get(ENV_KEY)
        request_id = given if given and SANE.fullmatch(given) else (
            f"{ids.prefix}-{next(ids.counter)}")
        resp.set_header(HEADER, request_id)
        # The raw fields only, from the WSGI environ itself (Falcon's remote_addr, root_path
        # and status_code each cost more than the rest of this step); a drain does the rest.
        # The client's address and the path as strings kept from earlier requests where
        # they are equal (a bounded memo; the route template, for a path that is one): the
        # server makes both anew for each request, and the flusher, taking records long
        # since out of the cache, spent 0.2 us a request on reaching and freeing them.
        addresses, address = self._addresses, env.get("REMOTE_ADDR", "127.0.0.1")
        kept = addresses.get(address)
        if kept is None and len(addresses) < ADDRESSES_KEPT:
            addresses[address] = kept = address
        path, template = req.path, req.uri_template
        answered = self._answered
        record = (answered_at, kept or address, req.method, env.get("SCRIPT_NAME", ""),
                  template if path == template else path, resp.status, elapsed, request_id,
                  template)
        answered.append(record)
        if self._count_each:  # several processes: the files have it now
            self._events.requests([record])
        if len(answered) >= self._batch:  # the flusher is starved: drain here
            self.drain()

    def drain(self) -> None:
        """Take every request's record that waits: tell the events of them (the metrics
        count them), and queue their lines to write (or drop them, counted, past
        ``max_pending``). Never waits for the stream; waits for a drain under way."""
        with self._draining:
            answered = self._answered
            waiting = len(answered)
            if not waiting:
                return
            # popleft ``waiting`` times, in C: only a drain pops, one at a time, so each of
            # them is there (and a record appended meanwhile waits for the next drain).
            records: list[Answered] = list(starmap(answered.popleft, repeat((), waiting)))
            if not self._count_each:
                with contextlib.suppress(Exception):  # a failing count costs no line
                    self._events.requests(records)
            self._queue_lines(records)

    def _queue_lines(self, records: list[Answered]) -> None:
        """Each record's line, in runs of one level, unless it is quiet; dropped past
        max_pending. A batch without a quiet path (the usual one) is queued at once, as one
        run."""
        quiet, prefixes = self._quiet, self._quiet_prefixes
        room = self._max_pending - (self._queued - self._taken)
        paths = set(map(_PATH, records))
        if (self._info and paths.isdisjoint(quiet)
                and not any(path.startswith(prefixes) for path in paths)):
            kept = records if len(records) <= room else records[:max(room, 0)]
            if kept:
                self._lines.append(("INFO", kept))
            dropped = len(records) - len(kept)
            self._queued += len(kept)
        else:
            dropped = self._queue_each(records, room)
        if dropped:
            with self._dropped_lock:
                self._dropped += dropped

    def _queue_each(self, records: list[Answered], room: int) -> int:
        """:meth:`_queue_lines`, record by record; the lines dropped."""
        quiet, prefixes, codes = self._quiet, self._quiet_prefixes, _CODES
        info, debug, dropped = self._info, self._debug, 0
        runs: list[tuple[str, list[Answered]]] = []
        for record in records:
            path, status = record[4], record[5]
            # Probes are quiet, unless refused: a 401 there is someone guessing tokens.
            if path in quiet or path.startswith(prefixes):
                code = codes.get(status)
                if code is None:
                    code = _code(status)
                if code < 400:
                    if not debug:
                        continue
                    level = "DEBUG"
                elif info:
                    level = "INFO"
                else:
                    continue
            elif info:
                level = "INFO"
            else:
                continue
            if room <= 0:  # the destination does not keep up
                dropped += 1
                continue
            room -= 1
            if runs and runs[-1][0] == level:
                runs[-1][1].append(record)
            else:
                runs.append((level, [record]))
        self._lines.extend(runs)
        self._queued += sum(len(run) for _, run in runs)
        return dropped

    @staticmethod
    def _object(line: tuple[str, Answered], offset: float) -> dict[str, Any]:
        """The line's fields, as the JSON format writes them (``offset``: :func:`_offset`)."""
        level, (answered_at, remote_addr, method, script_name, path, status, elapsed,
                request_id, _) = line
        return {"time": iso_timestamp(answered_at + offset), "level": level,
                "logger": LOGGER.name,
                "remote_addr": remote_addr, "method": method, "path": script_name + path,
                "status": falcon.http_status_to_code(status),
                "duration_ms": round(elapsed * 1000, 3), "request_id": request_id}

    def _format(self, runs: list[tuple[str, list[Answered]]], offset: float) -> str:
        """The lines of ``runs`` (each of one level), as the format writes them: each run's
        text at once (:func:`_text_of`), or each line's JSON (``offset``: :func:`_offset`)."""
        if self._json:
            return "".join(orjson.dumps(self._object((level, record), offset)).decode()
                           + "\n" for level, records in runs for record in records)
        return "".join(_text_of(level, records, offset) for level, records in runs)

    def flush(self, wait: float = -1) -> None:
        """Drain, then write the lines that wait; ``wait``: seconds to wait for a write
        under way (one stuck on its destination, say) before giving up, -1 for as long as
        it takes."""
        self.drain()
        if not self._writing.acquire(timeout=wait):
            return
        try:
            self._flush()
        finally:
            self._writing.release()
        with self._dropped_lock:
            dropped, self._dropped = self._dropped, 0
        if dropped:  # after a flush that got through: this line may too
            log.warning("%d access lines dropped: their destination took none for a while "
                        "(%d may wait)", dropped, self._max_pending)
            self._count_dropped(dropped)

    def _flush(self) -> None:
        runs = []
        with contextlib.suppress(IndexError):
            while True:
                runs.append(self._lines.popleft())
        if not runs:
            return
        self._taken += sum(len(records) for _, records in runs)
        offset = _offset()  # one wall-clock reading for the whole flush
        stream = self._stream or own_stream(LOGGER)
        if stream is None:
            for level, records in runs:
                for record in records:
                    # A host's filter or handler that raises ends neither the flusher nor
                    # the other lines.
                    with contextlib.suppress(Exception):
                        self._emit((level, record), offset)
            return
        if stream is not self._stream:  # the root's handler: its level still applies
            # Asked once per run, not once per line (a call per request).
            runs = [run for run in runs if LOGGER.isEnabledFor(_LEVELS[run[0]])]
        try:
            taken = stream.write(self._format(runs, offset))
            stream.flush()
        except (OSError, ValueError):  # stderr closed or gone: nowhere left to log
            return
        if taken == 0 and runs and isinstance(stream, LineQueue):  # full: the queue says so
            self._count_dropped(sum(len(records) for _, records in runs))

    def _after_fork_in_child(self) -> None:
        self._draining, self._writing = threading.Lock(), threading.Lock()
        self._dropped_lock, self._dropped = threading.Lock(), 0
        self._answered.clear()
        self._lines.clear()
        self._queued = self._taken = 0

    def _count_dropped(self, lines: int) -> None:
        with contextlib.suppress(Exception):  # the flusher outlives a failing count
            self._events.dropped(lines)

    def _emit(self, line: tuple[str, Answered], offset: float) -> None:
        """One line as a LogRecord, made at the request's time, through the logger."""
        level, (answered_at, remote_addr, method, script_name, path, status, elapsed,
                request_id, _) = line
        now = answered_at + offset
        path = script_name + path
        levelno = _LEVELS[level]
        if not LOGGER.isEnabledFor(levelno):
            return
        args = (escape(remote_addr), escape(method), escape(path),
                falcon.http_status_to_code(status), elapsed * 1000, escape(request_id))
        record = LOGGER.makeRecord(LOGGER.name, levelno, __file__, 0, "%s %s %s %d %.1fms %s",
                                   args, None, extra={"access": self._object(line, offset)})
        record.created, record.msecs = now, now % 1 * 1000
        LOGGER.handle(record)


def _offset() -> float:
    """What to add to a record's ``time.perf_counter()`` for its wall-clock time: the
    request's thread calls one clock, not two (the wall clock as it reads now: a clock
    stepped since the answer moves its line's time with it)."""
    return time.time() - time.perf_counter()


def _text_of(level: str, records: list[Answered], offset: float) -> str:
    """The text lines of ``records`` at ``level``, formatted by columns: the flusher's
    cost per line is the service's per request, and a loop formatting each line cost about
    0.6 us of the 3.5 the service spent on a create. Most of a line is the same from one
    to the next (level, client, method, path, status: formatted once per distinct set,
    escaped there; the usual batch has one, found by a count of each column), its time
    changes once a millisecond (formatted once per distinct millisecond), its duration
    takes few values (once per distinct tenth of a millisecond); per line are only C loops
    (``map``, ``count``, slice assignments), and no string is made per line: the pieces of
    every line are laid in one list, joined once. A request id needs no escapes: it is a
    client's that :data:`~plant_store.http.request_id.SANE` let through, or made here (hex
    and digits)."""
    count = len(records)
    if not count:
        return ""
    nows = list(map(add, map(_NOW, records), repeat(offset)))
    # timestamp()'s own key, and round()'s tenths: their float methods, called straight
    # (the built-ins look each method up again, one call in every three).
    millis = list(map(float.__floor__, map(mul, nows, repeat(1000))))
    stamp_of = {ms: timestamp(now) for ms, now in dict(zip(millis, nows, strict=True)).items()}
    first = records[0]
    middles: Iterable[str]
    if all(list(map(column, records)).count(first[at]) == count for at, column in _MIDDLE):
        middles = repeat(f" {_middle(level, *_FIELDS(first))} ", count)
    else:
        fields = list(map(_FIELDS, records))
        middle_of = {key: f" {_middle(level, *key)} " for key in set(fields)}
        middles = map(middle_of.__getitem__, fields)
    tenths = list(map(float.__round__, map(mul, map(_ELAPSED, records), repeat(10000))))
    duration_of = {n: f"{n // 10}.{n % 10}ms " for n in set(tenths)}  # ints format faster
    pieces = [""] * (5 * count)  # time, middle, duration, id, newline: for each line
    pieces[0::5] = map(stamp_of.__getitem__, millis)
    pieces[1::5] = middles
    pieces[2::5] = map(duration_of.__getitem__, tenths)
    pieces[3::5] = map(_ID, records)
    pieces[4::5] = repeat("\n", count)
    return "".join(pieces)


def _middle(level: str, remote_addr: str, method: str, script_name: str, path: str,
            status: Any) -> str:
    """A text line's fields between its time and its duration, the client's escaped."""
    code = _CODES.get(status)
    if code is None:
        code = _code(status)
    path = script_name + path
    chosen = remote_addr + method + path
    if not chosen.isprintable() or "\\" in chosen:
        remote_addr, method, path = escape(remote_addr), escape(method), escape(path)
    return f"{level} [plant_store.access] {remote_addr} {method} {path} {code}"


def _code(status: Any) -> int:
    """A status's code, remembered for the app's own statuses (few)."""
    code: int = falcon.http_status_to_code(status)
    if len(_CODES) < 64:
        _CODES[status] = code
    return code


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
    """A forked worker (gunicorn --preload, say) has no flusher thread: start its own. Its
    locks are new (a thread of the parent may have held one at the fork), and what the
    parent had not yet drained or written stays the parent's to write and count."""
    global _flusher, _flusher_lock
    _flusher, _flusher_lock = None, threading.Lock()
    for access in list(_live):
        access._after_fork_in_child()
    if _live:
        _start_flusher()
