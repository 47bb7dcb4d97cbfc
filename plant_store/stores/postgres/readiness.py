"""Readiness on a path of its own: ``/ready`` answers within a second whatever the request
threads and their pool are doing.

Invariants:

- A probe runs on the prober's own connection, never one of the pool's, so a pool that
  every request thread is waiting on cannot delay it.
- At most one probe runs at a time; a check that finds one running waits for that one's
  result (up to ``wait``) instead of starting another, so probes that time out cannot pile
  up connections on a server that is not answering.
- A check never waits longer than ``wait`` after the running probe began: past it, the
  answer is "not ready" at once, and the probe goes on in the background until the
  watchdog ends it. A probe that failed slowly (it took its whole wait) has its answer
  given again, at once, for ``wait`` after it ended; a quick "no" (a refused connection)
  is cheap to ask again, and is. So probes in a row or at once (an orchestrator's, a
  load balancer's, the two threads that serve probes) cost one probe's wait, not one
  each; a success is never reused, so "ready" is always a write that just committed.
"""

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import psycopg

from plant_store.stores.base import StoreUnavailable
from plant_store.stores.postgres import schema
from plant_store.stores.postgres.connection import reason
from plant_store.stores.postgres.deadline import Watchdog
from plant_store.stores.postgres.notices import noted, unconfirmed
from plant_store.stores.postgres.queries import QUERIES


class Prober:
    def __init__(self, connect: Callable[[], psycopg.Connection], watchdog: Watchdog,
                 where: str, wait: float = 0.9) -> None:
        self._connect = connect
        self._watchdog = watchdog
        self._where = where
        self._wait = wait
        self._lock = threading.Lock()
        self._running: Future[Any] | None = None
        self._started = 0.0  # when the running probe began (monotonic)
        self._finished = 0.0  # when the last one ended
        self._conn: psycopg.Connection | None = None  # only the probe's thread uses it
        self._closed = False

    def check(self) -> None:
        """Return when a write committed as a create's would; else StoreUnavailable."""
        with self._lock:
            if self._closed:
                raise StoreUnavailable(f"{self._where}: the store is closed", "unreachable")
            running = self._running
            finished = running is not None and running.done()
            error = running.exception() if running is not None and finished else None
            if error is not None and (
                    self._finished - self._started >= self._wait  # a slow "no", not a quick one
                    and time.monotonic() - self._finished < self._wait):
                raise error  # said within the wait: say it again
            if self._running is None or finished:
                self._running = Future()
                self._started = time.monotonic()
                threading.Thread(target=self._probe, args=(self._running,),
                                 name="plant-store-ready", daemon=True).start()
            running = self._running
            # A probe already past its wait has answered "not ready" to someone: say so at
            # once rather than wait again, so probes never queue behind a stuck one.
            left = self._started + self._wait - time.monotonic()
        try:
            running.result(timeout=max(left, 0))
        except FutureTimeout:
            raise StoreUnavailable(f"{self._where} did not confirm a write within "
                                   f"{self._wait:g} s", "deadline") from None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = self._running is None or self._running.done()
            if idle and self._conn is not None:  # else the probe's thread closes it
                self._conn.close()
                self._conn = None

    def _probe(self, result: Future[Any]) -> None:
        try:
            self._write()
        except StoreUnavailable as exc:
            result.set_exception(exc)
        except BaseException as exc:  # never leave a waiter without an answer
            result.set_exception(StoreUnavailable(f"{self._where}: {reason(exc)}", "unreachable"))
        else:
            result.set_result(None)
        finally:
            with self._lock:
                self._finished = time.monotonic()
                if self._closed and self._conn is not None:
                    self._conn.close()
                    self._conn = None

    def _write(self) -> None:
        try:
            conn = self._conn = self._conn or self._connect()
        except psycopg.Error as exc:
            raise StoreUnavailable(f"{self._where} is not reachable: {reason(exc)}",
                                   "unreachable") from None
        entry = self._watchdog.enter(conn, time.monotonic() + self._wait)
        try:
            noted(conn).clear()
            conn.execute(QUERIES["probe"])
            too_new = schema.too_new(conn)  # a later release's contract step applied
            if too_new:
                raise StoreUnavailable(f"{self._where}: {too_new}", "refused")
            if unconfirmed(noted(conn)):
                raise StoreUnavailable(f"{self._where}: a commit was not confirmed by the "
                                       "synchronous standby in time", "unconfirmed")
        except psycopg.errors.ReadOnlySqlTransaction:
            raise StoreUnavailable(f"{self._where} is read-only (a standby, or "
                                   "default_transaction_read_only): creates would fail",
                                   "read_only") from None
        except psycopg.Error as exc:
            what = "is not reachable" if conn.broken else "cannot take a write"
            raise StoreUnavailable(f"{self._where} {what}: {reason(exc)}",
                                   "unreachable") from None
        finally:
            if self._watchdog.exit(entry) or conn.broken:
                with contextlib.suppress(Exception):
                    conn.close()
                self._conn = None
