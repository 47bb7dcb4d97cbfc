"""Attempts and what their failures mean: the machinery that makes every answer true and
none wait without bound, kept apart from the store's semantics (store.py); and readiness,
a write on a connection of its own (:class:`Prober`).

An operation (one call of the store) runs its statements as attempts on pooled
connections, all under one deadline. An attempt ends in one of three ways: done; not done
(:class:`NotDone`: no connection was had, or the server answered with an ERROR, so its
transaction rolled back); or unsettled (:class:`Unsettled`: the connection broke after the
statement was sent, or the commit came back with a warning; it may have committed).

Invariants:

1. An operation's attempts share its deadline (:class:`Operation`): waiting for a
   connection, running and retrying all end by it; the watchdog cancels a statement past
   it from the client side.
2. Once any attempt of an operation may have committed, ``op.unsettled`` stays set, and a
   503 the operation answers says the outcome is unknown: never "not done", never a 412.
3. An unsettled write that a retry cannot settle (not in SETTLED_BY_RETRY) answers
   unknown at once; one that a retry settles is tried again until done or the deadline.
4. A request waiting for a connection is in ``waiting`` from before it asks the pool until
   it has one or gave up (under ``_waiting_lock``), so readiness sees every wait and only
   live ones. Every connection taken goes back to the pool, closed first when the
   watchdog acted on it (never reused).
"""

import contextlib
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout

from plant_store.stores.base import StoreUnavailable
from plant_store.stores.postgres import schema
from plant_store.stores.postgres.connection import noted, reason, unconfirmed, watched
from plant_store.stores.postgres.pool_adapter import Pool
from plant_store.stores.postgres.schema import QUERIES
from plant_store.util.concurrency import Watchdog

log = logging.getLogger("plant_store.stores.postgres.store")  # the name users filter on

WRITES = frozenset({"create", "create_one", "delete", "update", "hold_lane", "free_lane",
                    "begin_attempt", "delivered", "failed", "retry", "retry_dead", "import"})
# Settled by trying again: a create replays, a delete asks its token, an update meets its
# own write (the query), a read reads again.
SETTLED_BY_RETRY = frozenset({"create", "create_one", "delete", "update", "get", "page",
                              "page_tag", "count", "due", "dead", "outbox", "outbox_counts",
                              "rebase", "forget_deletes", "import",
                              "lanes", "lane", "hold_lane", "free_lane"})

Result = Callable[[psycopg.Cursor], Any]
Work = Callable[[psycopg.Connection], Any]


class Run(Protocol):
    """Run a named query until it is settled (the store's ``_run``): ``result(cursor)``,
    or what ``work(conn)`` returns."""

    def __call__(self, name: str, params: dict[str, Any], result: Result,
                 op: "Operation | None" = None, work: Work | None = None, /) -> Any: ...


class NotDone(Exception):
    """The attempt wrote nothing: its StoreUnavailable is the answer, or a retry may.
    ``locked``: it waited past lock_timeout for a row another transaction holds."""

    def __init__(self, error: StoreUnavailable, retry: bool = False,
                 locked: bool = False) -> None:
        self.error = error
        self.retry = retry
        self.locked = locked


class Alone(Exception):
    """A batch must not answer for its members: each runs its create alone, at once, in
    its own thread (a row of one of them was locked, or the batch was refused).
    ``unsettled``: an attempt of the batch may have committed, so a member that fails
    alone says its outcome is unknown, never that it was not done."""

    def __init__(self, unsettled: bool = False) -> None:
        super().__init__()
        self.unsettled = unsettled


class Unsettled(Exception):
    """The attempt may have written: only another attempt can tell."""


@dataclasses.dataclass
class Operation:
    """One call of the store, over all its statements: they share its deadline, and once an
    attempt of any of them may have committed, a 503 must say the outcome is unknown."""
    deadline: float  # monotonic
    unsettled: bool = False


class Attempts:
    """Runs named queries on the pool's connections: one attempt, and attempts until one
    is settled or the operation's deadline passes. ``wrote(seconds)``: told each write's
    round trip (the store's events' ``wrote``, given when it opens)."""

    def __init__(self, pool: Pool, watchdog: Watchdog, *, where: str, timeout: float,
                 pool_size: int, wrote: Callable[[float], None]) -> None:
        self.where = where
        self.timeout = timeout
        self._pool = pool
        self._pool_size = pool_size
        self._watchdog = watchdog
        self._wrote = wrote
        self._waiting: dict[object, float] = {}  # operations waiting for a connection: since
        self._waiting_lock = threading.Lock()

    def operation(self) -> Operation:
        """A new operation, its deadline ``timeout`` seconds from now."""
        return Operation(time.monotonic() + self.timeout)

    def run(self, name: str, params: dict[str, Any], op: Operation | None,
            attempt: Callable[[float], Any]) -> Any:
        """``attempt(deadline)`` until it is settled or the operation's deadline passes;
        what it returns."""
        op = op or self.operation()
        deadline, last = op.deadline, None
        for tried in itertools.count():
            try:
                return attempt(deadline)
            except Unsettled:
                op.unsettled = True
                if name not in SETTLED_BY_RETRY:
                    raise self.unknown(name) from None
            except NotDone as exc:
                if exc.locked and params.get("lock_timeout"):
                    raise Alone(op.unsettled) from None  # waiting on one member's row
                last = exc.error
                if not exc.retry:
                    last.unknown = op.unsettled
                    raise last from None
            if time.monotonic() >= deadline:
                if op.unsettled:
                    raise self.unknown(name) from None
                raise last or StoreUnavailable(
                    f"{self.where} did not answer within {self.timeout:g} s", "deadline")
            if tried:  # the first retry at once (a dead pooled connection), then slower
                time.sleep(min(0.05 * tried, 0.25, max(0.0, deadline - time.monotonic())))
        raise AssertionError("unreachable")

    def unknown(self, name: str) -> StoreUnavailable:
        return StoreUnavailable(f"{self.where} did not confirm the {name} within "
                                f"{self.timeout:g} s", "unconfirmed", unknown=True)

    def attempt(self, name: str, params: dict[str, Any], result: Result, deadline: float,
                work: Work | None = None) -> Any:
        """One attempt: ``result(cursor)`` of the named query, or what ``work(conn)``
        returns; NotDone or Unsettled when it fails."""
        remaining = deadline - time.monotonic()
        try:
            if remaining <= 0:
                raise PoolTimeout()
            waiter = object()
            with self._waiting_lock:
                self._waiting[waiter] = time.monotonic()
            try:
                conn = self._pool.getconn(timeout=remaining)
            finally:
                with self._waiting_lock:
                    del self._waiting[waiter]
        except PoolTimeout:
            raise NotDone(StoreUnavailable(
                f"{self.where} is not reachable, or all {self._pool_size} connections are "
                f"busy: none free within {self.timeout:g} s", "unreachable")) from None
        entry = watched(self._watchdog, conn, deadline)
        try:
            noted(conn).clear()
            started = time.perf_counter()  # the round trip, not the pool's wait
            answer = (work(conn) if work is not None
                      else result(conn.execute(QUERIES[name], params)))
            if name in WRITES:
                if unconfirmed(noted(conn)):
                    log.warning("%s: a %s's commit was not confirmed (a cancelled wait for a "
                                "synchronous standby?): %s", self.where, name,
                                "; ".join(message or "" for _, message in noted(conn)))
                    raise Unsettled()
                self._wrote(time.perf_counter() - started)
            return answer
        except psycopg.Error as exc:
            raise self.classify(name, exc, conn) from None
        finally:
            if self._watchdog.exit(entry):
                conn.close()  # the watchdog acted on it: never reuse it
            self._pool.putconn(conn)

    def classify(self, name: str, exc: psycopg.Error, conn: psycopg.Connection) -> Exception:
        """What a failed attempt means: a server ERROR on a live connection rolled the
        statement's transaction back; anything else (a broken connection, a FATAL sent as
        the server ended the session) may have come after the commit."""
        if conn.broken or conn.closed or exc.sqlstate is None or (
                exc.diag.severity_nonlocalized not in (None, "ERROR")):
            if name in WRITES:
                return Unsettled()
            return NotDone(StoreUnavailable(f"{self.where} is not reachable: {reason(exc)}",
                                            "unreachable"), retry=True)
        if isinstance(exc, pg_errors.SerializationFailure | pg_errors.DeadlockDetected):
            return NotDone(StoreUnavailable(f"{self.where}: too many conflicts",
                                            "contention"), retry=True)
        if isinstance(exc, pg_errors.LockNotAvailable):  # a lock_timeout (ours, or the role's)
            return NotDone(StoreUnavailable(f"{self.where}: a row stayed locked by another "
                                            "transaction", "contention"), retry=True,
                           locked=True)
        if isinstance(exc, pg_errors.QueryCanceled):
            if name in WRITES:  # it may have waited on another writer of the same row, one
                return Unsettled()  # whose outcome is unknown: a retry sees what it did
            return NotDone(StoreUnavailable(
                f"{self.where} did not answer within {self.timeout:g} s: {reason(exc)}",
                "deadline"))
        if isinstance(exc, pg_errors.ReadOnlySqlTransaction | pg_errors.InsufficientPrivilege):
            return NotDone(StoreUnavailable(f"{self.where} refuses writes: {reason(exc)}",
                                            "read_only"))
        if not isinstance(exc, pg_errors.OperationalError | pg_errors.InternalError):
            # A pooler's or an engine's own refusal, a prepared statement gone: logged as
            # the surprise it is, answered as a 503, never a 500.
            log.error("%s: %s failed: %s", self.where, name, reason(exc))
        return NotDone(StoreUnavailable(f"{self.where} refused the {name}: {reason(exc)}",
                                        "refused"))

    def waiting(self) -> tuple[int, float | None]:
        """How many requests wait for a connection, and since when the first (monotonic)."""
        with self._waiting_lock:
            return len(self._waiting), min(self._waiting.values(), default=None)


class Prober:
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
        entry = watched(self._watchdog, conn, time.monotonic() + self._wait)
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
