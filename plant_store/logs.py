"""Logging for the command line and the servers: one line per record on stderr, text or JSON.

Wherever the service runs (``plant-store serve``, the WSGI entry point under gunicorn or
uWSGI), it configures the root logger with one handler of its own, unless the host already
configured logging (the root logger has handlers): then the host keeps control, and the
access lines reach its handlers through the ``plant_store.access`` logger.
"""

import logging
import re
import sys
import threading
import time
from typing import TextIO

import orjson

FORMAT = "%(asctime)s %(levelname)s [%(name)s] %(message)s"
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


_own: logging.StreamHandler[TextIO] | None = None  # the handler configure() installed


def configure(level: str, log_format: str = "text") -> None:
    """Every record, one line each, on stderr, from ``level`` up."""
    global _own
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    _own = handler


def configure_unless_configured(level: str, log_format: str = "text") -> bool:
    """:func:`configure`, unless the root logger has handlers already (a host application,
    gunicorn's ``--log-config``): those keep control. Whether it configured."""
    if logging.getLogger().handlers:
        return False
    configure(level, log_format)
    return True


def own_stream(logger: logging.Logger) -> TextIO | None:
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
