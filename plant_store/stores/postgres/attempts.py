"""Attempts and what their failures mean: the machinery that makes every answer true and
none wait without bound, kept apart from the store's semantics (store.py).

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

import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout

from plant_store.stores.base import StoreUnavailable
from plant_store.stores.postgres import notices
from plant_store.stores.postgres.connection import reason
from plant_store.stores.postgres.deadline import Watchdog
from plant_store.stores.postgres.pool_adapter import Pool
from plant_store.stores.postgres.queries import QUERIES

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
        entry = self._watchdog.enter(conn, deadline)
        try:
            notices.noted(conn).clear()
            started = time.perf_counter()  # the round trip, not the pool's wait
            answer = (work(conn) if work is not None
                      else result(conn.execute(QUERIES[name], params)))
            if name in WRITES:
                if notices.unconfirmed(notices.noted(conn)):
                    log.warning("%s: a %s's commit was not confirmed (a cancelled wait for a "
                                "synchronous standby?): %s", self.where, name,
                                "; ".join(message or "" for _, message in notices.noted(conn)))
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
