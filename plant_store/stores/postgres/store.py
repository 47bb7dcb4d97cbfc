"""Plants in PostgreSQL, through psycopg 3 and its connection pool.

Every change is one statement in autocommit mode: one round trip, one transaction, and no
transaction held open across anything slow (the webhook worker holds a URL's lane with a
lease, sends, then records the outcome, each a statement of its own).

Every answer is true, and none waits without bound:

- Each operation has a deadline (``timeout`` seconds, the ``database_timeout`` setting)
  for all of it: waiting for a connection, running, retrying. The watchdog
  cancels past it, from the client side, whatever the server is doing (connection.py).
- An attempt ends in one of three ways. Done. Not done: no connection was had, or the
  server answered the statement with an ERROR, so its transaction rolled back. Unsettled:
  the connection broke after the statement was sent (the commit may have happened), or
  the commit came back with a warning (a synchronous standby's confirmation was cancelled:
  committed here, maybe not there; see connection.py).
- Creates, deletes and reads are tried again on another connection until done or the
  deadline, so a dead pooled connection (after a failover, all of them) costs a retry,
  not an error. A create is idempotent: its retry is a replay, and a replay writes, so it
  answers only once the plant is as durable as a create's commit makes it. A delete notes
  a token of its own with its work, and its retry asks the token. Only when the deadline
  comes first is the answer 503, and :class:`StoreUnavailable` says whether the write is
  known not done or its outcome is unknown (``unknown``).
- A new connection gets the session settings (statement_timeout, applied with a plain
  ``set_config``, which poolers pass through, and checked: the store refuses to start
  when it does not take), and psycopg's prepared statements only where the setting allows.
- Reconnection while the database is away is tried at least every second (the pool's own
  back-off would grow to minutes), so the service answers within about a second of a new
  primary being reachable.

Positions are the clock's base plus the creating transaction's id; the clock moves when
the data finds itself on another server or timeline (migration 0002 and query ``rebase``
say how), so order and cursors survive a dump and restore, an upgrade and a promotion.
"""

import itertools
import logging
import os
import time
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg

from plant_store.events import Events
from plant_store.logs import Throttle
from plant_store.stores.base import (
    PreconditionFailed,
    Store,
    StoreUnavailable,
    check_delete,
    needs_update,
)
from plant_store.stores.postgres.attempts import (
    Attempts,
    Operation,
    Prober,
    Result,
    Unsettled,
    Work,
)
from plant_store.stores.postgres.connection import (
    Session,
    check_url,
    deadlines,
    describe,
    options,
    reason,
)
from plant_store.stores.postgres.pool_adapter import Pool
from plant_store.stores.postgres.schema import QUERIES as QUERIES  # reached from here
from plant_store.stores.postgres.writes import BulkImport, Creates, columns
from plant_store.stores.postgres.writes import delivery as _delivery
from plant_store.stores.postgres.writes import plant_of as _plant
from plant_store.stores.postgres.writes import version as _version
from plant_store.stores.records import Delivery, Plant, Preconditions, Versioned
from plant_store.util.words import counted

log = logging.getLogger(__name__)

# Reached through this module since before its parts moved out: a test loses an answer by
# raising _Unsettled from an attempt.
_Unsettled = Unsettled

RECONNECT_EVERY = 1.0  # seconds: the most the pool waits between attempts to reconnect
FORGET_EVERY = 1024  # deletes between clean-ups of old delete tokens
BUSY_AFTER = 0.5  # seconds a request may wait for a connection before /ready says busy
UNREACHABLE_EVERY = 10.0  # seconds: the most often failures to connect are logged (Throttle)


class PostgresStore(Store):
    """The store's semantics; its parts in modules by concern: attempts, what their
    failures mean, and readiness (attempts.py), the row codec, batched creates and bulk
    import (writes.py), each new connection's settings and the first connection's look at
    the schema (connection.py), the SQL (schema.py)."""

    def __init__(self, url: str, *, pool_size: int = 10, timeout: float = 5.0,
                 statement_timeout: float = 5.0, prepared_statements: bool = True,
                 migrate: bool = True, events: Events | None = None) -> None:
        """``events``: told each write statement's round trip (the metrics)."""
        self.events = events if events is not None else Events()
        check_url(url)
        self.where = describe(url)
        self._pool_size = pool_size
        self._timeout = timeout
        self._deletes = itertools.count(1)
        self._name = uuid.uuid4().hex  # of this store, in lane leases
        self._watchdog = deadlines()
        # Through self, at each call: what a test puts in the store's _run runs them too.
        self._creates = Creates(lambda *args: self._run(*args), self._rebase,
                                where=self.where, timeout=timeout)
        self._bulk = BulkImport(lambda *args: self._run(*args), self._rebase,
                                where=self.where, timeout=timeout)
        kwargs = options(url, prepared_statements=prepared_statements)
        session = Session(self.where, statement_timeout=statement_timeout,
                          pooled=not prepared_statements)
        session.first(url, timeout, kwargs, migrate=migrate)
        self._unreachable = Throttle(UNREACHABLE_EVERY)
        self._pool = Pool(
            url, min_size=1, max_size=pool_size, timeout=timeout, open=False,
            name="plant-store", kwargs=kwargs, configure=session.configure,
            reconnect_every=RECONNECT_EVERY, on_failure=self._connect_failed)
        self._pool.open(wait=False)
        self._attempts = Attempts(self._pool, self._watchdog, where=self.where,
                                  timeout=timeout, pool_size=pool_size,
                                  wrote=self.events.wrote)
        self._prober = Prober(lambda: session.configure(psycopg.connect(url, **kwargs)),
                              self._watchdog, self.where)

    def _connect_failed(self, error: str) -> None:
        self._unreachable.error(log, "%s is not reachable: %s", self.where, reason(error))

    def _run(self, name: str, params: dict[str, Any], result: Result,
             op: Operation | None = None, work: Work | None = None) -> Any:
        """Run a named query and return ``result(cursor)``, trying again on another
        connection until it is settled or the operation's deadline passes. ``work``: run
        it on the connection instead, for what is more than one statement (an import's
        transaction), and return what it returns."""
        return self._attempts.run(
            name, params, op, lambda deadline: self._attempt(name, params, result, deadline,
                                                             work))

    def _attempt(self, name: str, params: dict[str, Any], result: Result, deadline: float,
                 work: Work | None = None) -> Any:
        """One attempt (the seam a test overrides to lose an answer)."""
        return self._attempts.attempt(name, params, result, deadline, work)

    def _unknown(self, name: str) -> StoreUnavailable:
        return self._attempts.unknown(name)

    def create(self, plant: Plant, webhooks: Sequence[str] = ()) -> tuple[Plant, bool]:
        return self._creates.create(plant, webhooks)

    def create_many(self, plants: Sequence[Plant]) -> list[tuple[Plant, bool]]:
        """See :meth:`BulkImport.create_many`."""
        return self._bulk.create_many(plants)

    def update(self, plant: Plant,
               condition: Preconditions | None = None) -> tuple[Versioned, bool] | None:
        """Read, decide, then compare and set (the update query): a plant changed between
        the read and the write is read again and decided anew, within the deadline."""
        op = self._attempts.operation()
        while True:
            found = self._read(plant.id, op)
            try:
                if found is None:
                    return None
                stored, version = found
                changes = needs_update(Versioned(stored, _version(*version)), plant, condition)
            except PreconditionFailed:
                if op.unsettled:  # an earlier try of ours may be what changed it
                    raise self._unknown("update") from None
                raise
            name, tag = columns(plant)
            params = {"id": plant.id, "name": name, "tag": tag,
                      "was_position": version[0], "was_rev": version[1],
                      "was_stamp": version[2]}
            written = self._run("update", params, lambda cur: cur.fetchone(), op)
            if written is not None:
                return Versioned(plant, _version(*written)), changes
            self._check_deadline(op, "update")

    def delete(self, plant_id: int, condition: Preconditions | None = None) -> bool:
        op = self._attempts.operation()
        while True:
            version = None
            if condition is not None:
                found = self._read(plant_id, op)
                if found is None:
                    return False
                stored, version = found
                check_delete(Versioned(stored, _version(*version)), condition)
            params = {"id": plant_id, "token": uuid.uuid4(), "conditional": version is not None,
                      "was_position": None if version is None else version[0],
                      "was_rev": None if version is None else version[1],
                      "was_stamp": None if version is None else version[2]}
            # A retry's note of the token meets an earlier attempt's (committed, or waited
            # for while it commits) and answers what that attempt did: see the query.
            # The delete query answers one row, deleted or not: fetchone() is never None.
            deleted: bool = self._run(
                "delete", params, lambda cur: cur.fetchone()[0], op)  # type: ignore[index]
            if next(self._deletes) % FORGET_EVERY == 0:
                try:
                    self._run("forget_deletes", {}, lambda cur: None)
                except StoreUnavailable as exc:
                    log.warning("%s: old delete tokens were not removed: %s", self.where, exc)
            if deleted or version is None:
                return deleted
            self._check_deadline(op, "delete")  # changed or gone since read: decide anew

    def _read(self, plant_id: int,
              op: Operation) -> tuple[Plant, tuple[int, int, int]] | None:
        """The plant and its (position, revision, stamp)."""
        row = self._run("get", {"id": plant_id}, lambda cur: cur.fetchone(), op)
        return None if row is None else (_plant(plant_id, *row[:2]), (row[2], row[3], row[4]))

    def _check_deadline(self, op: Operation, name: str) -> None:
        """A conditional write that keeps finding the plant changed ends by its deadline."""
        if time.monotonic() >= op.deadline:
            if op.unsettled:
                raise self._unknown(name)
            raise StoreUnavailable(f"{self.where}: the plant kept changing", "contention")

    def fetch(self, plant_id: int) -> Versioned | None:
        found = self._read(plant_id, self._attempts.operation())
        return None if found is None else Versioned(found[0], _version(*found[1]))

    def page(self, start: int, limit: int,
             tag: str | None = None) -> tuple[list[Plant], int | None]:
        op = self._attempts.operation()
        if tag is None:
            rows = self._page_rows("page", {"start": start, "limit": limit + 1}, op)
        else:
            rows = self._tag_rows(tag.encode(), start, limit + 1, op)
        plants = [_plant(plant_id, name, tag) for plant_id, name, tag, _ in rows[:limit]]
        return plants, rows[limit][3] if len(rows) > limit else None

    def _tag_rows(self, tag: bytes, start: int, wanted: int, op: Operation) -> list[Any]:
        """Up to ``wanted`` rows of ``tag``'s plants from ``start``; the query finds them by
        the tag's digest, and rows of another tag with the same digest are dropped here."""
        rows: list[Any] = []
        while True:
            asked = wanted - len(rows)
            found = self._page_rows("page_tag", {"tag": tag, "start": start, "limit": asked},
                                    op)
            rows += [row for row in found if row[2] == tag]
            if len(found) < asked or len(rows) >= wanted:
                return rows
            start = found[-1][3] + 1

    def _page_rows(self, query: str, params: dict[str, Any], op: Operation) -> list[Any]:
        for _ in range(3):
            rows: list[Any] = self._run(query, params, lambda cur: cur.fetchall(), op)
            if not rows or rows[-1][0] is not None:
                return rows
            self._rebase(op)
        raise StoreUnavailable(f"{self.where}: its clock keeps moving", "contention")

    def _rebase(self, op: Operation) -> None:
        self._run("rebase", {"force": False}, lambda cur: cur.rowcount, op)
        log.info("%s: the data is on a new server or timeline; positions continue above "
                 "every earlier one", self.where)

    def __len__(self) -> int:
        # An aggregate answers one row: fetchone() is never None (count and outbox_counts).
        count: int = self._run("count", {}, lambda cur: cur.fetchone()[0])  # type: ignore[index]
        return count

    def deliveries(self, *, dead: bool = False) -> list[Delivery]:
        rows = self._run("dead" if dead else "due", {}, lambda cur: cur.fetchall())
        return [_delivery(*row) for row in rows]

    def outbox(self) -> list[Delivery]:
        rows = self._run("outbox", {}, lambda cur: cur.fetchall())
        return [_delivery(*row) for row in rows]

    def retry_dead(self, delivery_ids: Sequence[str] | None = None) -> list[str]:
        """One statement, so one transaction: see the query."""
        ids = None if delivery_ids is None else sorted(set(delivery_ids))
        found, moved = self._run("retry_dead", {"ids": ids}, lambda cur: cur.fetchone())
        if ids is not None and len(found) < len(ids):
            raise KeyError(min(set(ids) - set(found)))
        return sorted(moved)

    def outbox_counts(self) -> tuple[int, int]:
        counts: tuple[int, int] = self._run(
            "outbox_counts", {}, lambda cur: tuple(cur.fetchone()))  # type: ignore[arg-type]
        return counts

    def lanes(self) -> list[str]:
        urls: list[str] = self._run("lanes", {"holder": self._holder()},
                                    lambda cur: [url for (url,) in cur.fetchall()])
        return urls

    def lane(self, url: str, limit: int) -> list[Delivery]:
        rows = self._run("lane", {"url": url, "limit": limit}, lambda cur: cur.fetchall())
        return [_delivery(*row[:-1]) for row in itertools.takewhile(lambda row: row[-1], rows)]

    def hold_lane(self, url: str, lease: float) -> bool:
        held: bool = self._run("hold_lane",
                               {"url": url, "holder": self._holder(), "lease": lease},
                               lambda cur: cur.rowcount == 1)
        return held

    def begin_attempt(self, delivery: Delivery, lease: float, max_attempts: int) -> int | None:
        number, held = self._run("begin_attempt", {
            "id": delivery.id, "url": delivery.url, "holder": self._holder(), "lease": lease,
            "max": max_attempts}, lambda cur: cur.fetchone())
        return number if held else None

    def free_lane(self, url: str) -> None:
        self._run("free_lane", {"url": url, "holder": self._holder()}, lambda cur: None)

    def _holder(self) -> str:
        """This worker's name for lane leases: the process too, as a store made before a
        pre-fork server forks is each worker's, and each worker sends on its own."""
        return f"{self._name}:{os.getpid()}"

    def settle(self, delivery_id: str, state: str, error: str | None = None,
               retry_in: float = 0.0) -> None:
        params: dict[str, Any]
        if state == "delivered":
            name, params = "delivered", {"id": delivery_id}
        elif state == "retry":
            name, params = "retry", {"id": delivery_id}
        else:
            name, params = "failed", {"id": delivery_id, "error": error,
                                      "dead": state == "dead", "retry_in": retry_in}
        if not self._run(name, params, lambda cur: cur.rowcount == 1):
            raise KeyError(delivery_id)

    def check(self) -> None:
        """Ready when no request has waited BUSY_AFTER for a connection (a moment's wait
        under load is no reason to take an instance out) and a write commits now, on the
        prober's own connection, within a second."""
        waiting, oldest = self._attempts.waiting()
        if oldest is not None and time.monotonic() - oldest > BUSY_AFTER:
            raise StoreUnavailable(
                f"{self.where}: all {self._pool_size} connections are busy: "
                f"{counted(waiting, 'request')} wait for one, the first for "
                f"{time.monotonic() - oldest:.1f} s", "busy")
        self._prober.check()

    def close(self) -> None:
        self._prober.close()
        self._pool.close(timeout=1.0)
        self._watchdog.close()

