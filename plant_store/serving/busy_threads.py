"""How many of a server's request threads are busy, and since when, told by the app's
calls themselves: for a server that says nothing of it (granian), so that the probe port
can say "not ready" while every thread has been held for a while (a client trickling a
body holds a thread with no deadline under granian: the hostile pass on issue 42).

Invariant: ``started`` holds one entry per call of the app not yet returned, keyed by a
token of its own, under ``_lock``; the oldest entry's age is how long the longest call
has run."""

import itertools
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

BUSY_FOR = 1.0  # seconds every thread must have been busy before /ready says so


class BusyThreads:
    """A WSGI app that counts its calls in flight (``app``), and :meth:`unready`."""

    def __init__(self, app: Callable[..., Iterable[bytes]], threads: int) -> None:
        self._app, self._threads = app, threads
        self._lock = threading.Lock()
        self._tokens = itertools.count()
        self.started: dict[int, float] = {}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        token = next(self._tokens)
        with self._lock:
            self.started[token] = time.monotonic()
        try:
            return self._app(environ, start_response)  # the app answers with one bytes body
        finally:
            with self._lock:
                del self.started[token]

    def running(self) -> tuple[list[float], bool]:
        """Seconds each call in flight has run, and whether every thread is busy."""
        now = time.monotonic()
        with self._lock:
            ages = [now - started for started in self.started.values()]
        return ages, len(ages) >= self._threads

    def unready(self) -> str | None:
        """Why new requests wait (every thread busy for BUSY_FOR s or more), or None."""
        with self._lock:
            if len(self.started) < self._threads:
                return None
            oldest = min(self.started.values())
        if time.monotonic() - oldest < BUSY_FOR:
            return None
        return (f"Every request thread ({self._threads}) has been busy for {BUSY_FOR:g} s "
                "or more: new requests wait for one.")
