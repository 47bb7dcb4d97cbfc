"""psycopg_pool's ConnectionPool as the store needs it, and every reach into its private
names (tests/unit/test_library_pins.py pins each behaviour relied on).

The pool reconnects at least every ``reconnect_every`` seconds while the database is away:
psycopg_pool's own back-off doubles from 1 s, so the service would come back minutes after
the database. No public route caps it: ``reconnect_timeout`` is when psycopg_pool gives up
(requests already waiting for a connection then wait out their deadlines),
``reconnect_failed`` is told only then, ``check()`` does not bring forward a retry already
scheduled, and the back-off's constants belong to a private class. Relied on, as read in
psycopg_pool 3.2.1 to 3.3.3 (3.2.0 named the class ``ConnectionAttempt``):

- ``psycopg_pool.base.AttemptWithBackoff``: made with ``timeout=``; ``update_delay(now)``
  sets ``delay``, the seconds until the next attempt;
- ``ConnectionPool._add_connection(attempt, growing=False)``: a reconnection starts there
  with no attempt, and each retry comes back to it ``attempt.delay`` later with the same one.

Each connection the pool could not make is told to ``on_failure``, through psycopg_pool's
public logging: it logs each as a WARNING ``error connecting in <name!r>: <error>`` on the
``psycopg.pool`` logger, where a filter hands the error's text to the pool's hook. The
filter also keeps every record of psycopg_pool's at WARNING or below from being printed
(several lines of libpq's each, several a second while the database is away): the store
says what they mean in lines of its own, throttled.
"""

import itertools
import logging
from collections.abc import Callable
from typing import Any

from psycopg_pool import ConnectionPool
from psycopg_pool.base import AttemptWithBackoff

_LOGGER = logging.getLogger("psycopg.pool")
_log = logging.getLogger(__name__)
_numbers = itertools.count(1)  # pool names: the filter tells the pools' records apart by them


class Pool(ConnectionPool):
    """A ConnectionPool (``name`` made unique) that reconnects at least every
    ``reconnect_every`` seconds and tells ``on_failure`` each failed connection's text."""

    def __init__(self, conninfo: str, *, name: str, reconnect_every: float,
                 on_failure: Callable[[str], None], **kwargs: Any) -> None:
        name = f"{name}-{next(_numbers)}"
        self._reconnect_every = reconnect_every
        self._failing = f"error connecting in {name!r}"
        _FILTER.hooks[self._failing] = on_failure  # before super(): open=True connects there
        _LOGGER.addFilter(_FILTER)  # once: a filter is added once
        if not _LOGGER.isEnabledFor(logging.WARNING):  # else the records are never made
            _LOGGER.setLevel(logging.WARNING)  # (the filter prints none of them)
        super().__init__(conninfo, name=name, **kwargs)

    def close(self, timeout: float = 5.0) -> None:
        super().close(timeout)
        _FILTER.hooks.pop(self._failing, None)

    def _add_connection(self, attempt: AttemptWithBackoff | None,
                        growing: bool = False) -> None:
        super()._add_connection(
            attempt or Reconnect(self._reconnect_every, timeout=self.reconnect_timeout),
            growing)


class Reconnect(AttemptWithBackoff):
    """psycopg_pool's reconnection back-off, capped at ``every`` seconds."""

    def __init__(self, every: float, *, timeout: float) -> None:
        super().__init__(timeout=timeout)
        self.every = every

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, self.every)


class _Filter(logging.Filter):
    """On ``psycopg.pool``: failed connections to their pool's hook; nothing at WARNING or
    below printed."""

    def __init__(self) -> None:
        super().__init__()
        self.hooks: dict[str, Callable[[str], None]] = {}  # by "error connecting in <name!r>"

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING:
            return True
        if record.levelno == logging.WARNING:
            failing, _, error = record.getMessage().partition(": ")
            hook = self.hooks.get(failing)
            if hook is not None:
                try:
                    hook(error)
                except Exception:  # it would end the pool's reconnection (logged in there)
                    _log.exception("%s: its failure hook failed", failing)
        return False


_FILTER = _Filter()
