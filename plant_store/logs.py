"""Logging for the command line and the server: one line per record on stderr."""

import logging
import sys
import time

FORMAT = "%(asctime)s %(levelname)s [%(name)s] %(message)s"
_second: tuple[int, str] = (-1, "")


def timestamp(now: float) -> str:
    """``2026-11-22 21:05:51,123`` in local time; the text of the second is made once."""
    global _second
    second, text = _second
    if second != int(now):
        second = int(now)
        text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
        _second = (second, text)  # one assignment, so threads never see a torn pair
    return f"{text},{int((now - second) * 1000):03d}"


class TextFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return timestamp(record.created)


def configure(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter(FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
