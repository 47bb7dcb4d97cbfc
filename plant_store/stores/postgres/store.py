"""Plants in PostgreSQL, through psycopg 3 and its connection pool.

Every change is one statement in autocommit mode: one round trip, one transaction, and no
transaction held open across anything slow (the webhook worker holds a URL's lane with a
lease, sends, then records the outcome, each a statement of its own).

Every answer is true, and none waits without bound:

- Each operation has a deadline (``timeout`` seconds, the ``database_timeout`` setting)
  for all of it: waiting for a connection, running, retrying. The watchdog (deadline.py)
  cancels past it, from the client side, whatever the server is doing.
- An attempt ends in one of three ways. Done. Not done: no connection was had, or the
  server answered the statement with an ERROR, so its transaction rolled back. Unsettled:
  the connection broke after the statement was sent (the commit may have happened), or
  the commit came back with a warning (a synchronous standby's confirmation was cancelled:
  committed here, maybe not there; see notices.py).
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

import dataclasses
import functools
import itertools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout

from plant_store.logs import Throttle
from plant_store.stores.base import (
    BatchConflict,
    Condition,
    Conflict,
    Plant,
    PreconditionFailed,
    Store,
    StoreError,
    StoreUnavailable,
    Versioned,
    check_delete,
    needs_update,
    replay,
)
from plant_store.stores.outbox import Delivery, deliveries_for
from plant_store.stores.postgres import notices, schema
from plant_store.stores.postgres.batches import Batcher
from plant_store.stores.postgres.connection import (
    check_url,
    connect,
    describe,
    options,
    reason,
)
from plant_store.stores.postgres.deadline import Watchdog
from plant_store.stores.postgres.pool_adapter import Pool
from plant_store.stores.postgres.queries import QUERIES
from plant_store.stores.postgres.readiness import Prober
from plant_store.util.words import counted

log = logging.getLogger(__name__)

WRITES = frozenset({"create", "create_one", "delete", "update", "hold_lane", "free_lane",
                    "begin_attempt", "delivered", "failed", "retry", "retry_dead", "import"})
# Settled by trying again: a create replays, a delete asks its token, an update meets its
# own write (the query), a read reads again.
SETTLED_BY_RETRY = frozenset({"create", "create_one", "delete", "update", "get", "page",
                              "page_tag", "count", "due", "dead", "outbox", "outbox_counts",
                              "rebase", "forget_deletes", "import",
                              "lanes", "lane", "hold_lane", "free_lane"})
RECONNECT_EVERY = 1.0  # seconds: the most the pool waits between attempts to reconnect
FORGET_EVERY = 1024  # deletes between clean-ups of old delete tokens
BUSY_AFTER = 0.5  # seconds a request may wait for a connection before /ready says busy
BATCH_LIMIT = 1024  # creates in one statement: positions leave 1024 slots a transaction
BATCHES_RUNNING = 1  # batches of creates under way at once, each on its own connection
BATCH_PATIENCE = 0.05  # seconds a create waits for a batch ahead before it leads its own
BATCH_LOCK_WAIT = "50ms"  # the most a batch waits for a locked row before each goes alone
UNREACHABLE_EVERY = 10.0  # seconds: the most often failures to connect are logged (Throttle)


class _NotDone(Exception):
    """The attempt wrote nothing: its StoreUnavailable is the answer, or a retry may.
    ``locked``: it waited past lock_timeout for a row another transaction holds."""

    def __init__(self, error: StoreUnavailable, retry: bool = False,
                 locked: bool = False) -> None:
        self.error = error
        self.retry = retry
        self.locked = locked


class _Alone(Exception):
    """A batch must not answer for its members: each runs its create alone, at once, in
    its own thread (a row of one of them was locked, or the batch was refused).
    ``unsettled``: an attempt of the batch may have committed, so a member that fails
    alone says its outcome is unknown, never that it was not done."""

    def __init__(self, unsettled: bool = False) -> None:
        super().__init__()
        self.unsettled = unsettled


class _Unsettled(Exception):
    """The attempt may have written: only another attempt can tell."""


@dataclasses.dataclass
class _Operation:
    """One call of the store, over all its statements: they share its deadline, and once an
    attempt of any of them may have committed, a 503 must say the outcome is unknown."""
    deadline: float  # monotonic
    unsettled: bool = False


class PostgresStore(Store):
    def __init__(self, url: str, *, pool_size: int = 10, timeout: float = 5.0,
                 statement_timeout: float = 5.0, prepared_statements: bool = True,
                 migrate: bool = True) -> None:
        check_url(url)
        self.where = describe(url)
        self._pool_size = pool_size
        self._timeout = timeout
        self._statement_ms = round(statement_timeout * 1000)
        # Without prepared statements the store expects a pooler in transaction mode, where
        # a session's SET stays on whichever server connection ran it: the bound must be
        # every session's own (the role's or the database's).
        self._pooled = not prepared_statements
        self._deletes = itertools.count(1)
        self._name = uuid.uuid4().hex  # of this store, in lane leases
        self._waiting: dict[object, float] = {}  # operations waiting for a connection: since
        self._waiting_lock = threading.Lock()
        self._watchdog = Watchdog()
        self._creates: Batcher[_NewPlant, tuple[Plant, bool]] = Batcher(
            self._create_batch, limit=BATCH_LIMIT, running=BATCHES_RUNNING,
            patience=BATCH_PATIENCE)
        kwargs = options(url, prepared_statements=prepared_statements)
        # The first connection is made here, not by the pool, so that a start that fails
        # says why (the pool only says that it had no connection in time).
        with connect(url, timeout, **kwargs) as conn:
            self._configure(conn)
            try:
                if migrate:
                    for name in schema.migrate(conn):
                        log.info("%s: applied migration %s", self.where, name)
                else:
                    missing = schema.pending(conn)
                    if missing:
                        raise StoreError(f"{self.where} lacks migrations {', '.join(missing)}; "
                                         "run 'plant-store db migrate'")
                too_new = schema.too_new(conn)
                if too_new:
                    raise StoreError(f"cannot use {self.where}: {too_new}")
            except psycopg.Error as exc:
                raise StoreError(f"cannot use {self.where}: {reason(exc)}") from None
        self._unreachable = Throttle(UNREACHABLE_EVERY)
        self._pool = Pool(
            url, min_size=1, max_size=pool_size, timeout=timeout, open=False,
            name="plant-store", kwargs=kwargs, configure=self._configure,
            reconnect_every=RECONNECT_EVERY, on_failure=self._connect_failed)
        self._pool.open(wait=False)
        self._prober = Prober(lambda: self._configure(psycopg.connect(url, **kwargs)),
                              self._watchdog, self.where)

    def _connect_failed(self, error: str) -> None:
        self._unreachable.error(log, "%s is not reachable: %s", self.where, reason(error))

    def _configure(self, conn: psycopg.Connection) -> psycopg.Connection:
        """Every new connection: its notices watched, statement_timeout applied and
        checked (StoreError naming it when it did not take)."""
        notices.watch(conn)
        wanted = self._statement_ms
        # SHOW-like queries answer one row: fetchone() is never None here (twice below).
        current, default = conn.execute(QUERIES["statement_timeout"]).fetchone()  # type: ignore[misc]
        if self._pooled and (default == 0 or default > wanted):
            raise StoreError(
                f"{self.where}: with database_prepared_statements = false (a pooler in "
                f"transaction mode) statement_timeout must be the role's own, at most "
                f"{wanted} ms (it is {f'{default} ms' if default else 'unbounded'}): "
                f"ALTER ROLE ... SET statement_timeout = '{wanted}ms'")
        if current == 0 or current > wanted:  # a role's or database's own bound may do
            conn.execute(QUERIES["set_statement_timeout"], {"ms": str(wanted)})
            current = conn.execute(QUERIES["statement_timeout"]).fetchone()[0]  # type: ignore[index]
            if current != wanted:
                raise StoreError(
                    f"{self.where}: setting statement_timeout={wanted} ms did not take (it "
                    f"is {current} ms); behind a pooler in transaction mode, set it for the "
                    f"role instead: ALTER ROLE ... SET statement_timeout = '{wanted}ms'")
        return conn

    def _run(self, name: str, params: dict[str, Any], result: Callable[[psycopg.Cursor], Any],
             op: "_Operation | None" = None,
             work: Callable[[psycopg.Connection], Any] | None = None) -> Any:
        """Run a named query and return ``result(cursor)``, trying again on another
        connection until it is settled or the operation's deadline passes. ``work``: run
        it on the connection instead, for what is more than one statement (an import's
        transaction), and return what it returns."""
        op = op or _Operation(time.monotonic() + self._timeout)
        deadline, last = op.deadline, None
        for attempt in itertools.count():
            try:
                return self._attempt(name, params, result, deadline, work)
            except _Unsettled:
                op.unsettled = True
                if name not in SETTLED_BY_RETRY:
                    raise self._unknown(name) from None
            except _NotDone as exc:
                if exc.locked and params.get("lock_timeout"):
                    raise _Alone(op.unsettled) from None  # waiting on one member's row
                last = exc.error
                if not exc.retry:
                    last.unknown = op.unsettled
                    raise last from None
            if time.monotonic() >= deadline:
                if op.unsettled:
                    raise self._unknown(name) from None
                raise last or StoreUnavailable(
                    f"{self.where} did not answer within {self._timeout:g} s", "deadline")
            if attempt:  # the first retry at once (a dead pooled connection), then slower
                time.sleep(min(0.05 * attempt, 0.25, max(0.0, deadline - time.monotonic())))
        raise AssertionError("unreachable")

    def _unknown(self, name: str) -> StoreUnavailable:
        return StoreUnavailable(f"{self.where} did not confirm the {name} within "
                                f"{self._timeout:g} s", "unconfirmed", unknown=True)

    def _attempt(self, name: str, params: dict[str, Any],
                 result: Callable[[psycopg.Cursor], Any], deadline: float,
                 work: Callable[[psycopg.Connection], Any] | None = None) -> Any:
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
            raise _NotDone(StoreUnavailable(
                f"{self.where} is not reachable, or all {self._pool_size} connections are "
                f"busy: none free within {self._timeout:g} s", "unreachable")) from None
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
                    raise _Unsettled()
                self.observer.wrote(time.perf_counter() - started)
            return answer
        except psycopg.Error as exc:
            raise self._classify(name, exc, conn) from None
        finally:
            if self._watchdog.exit(entry):
                conn.close()  # the watchdog acted on it: never reuse it
            self._pool.putconn(conn)

    def _classify(self, name: str, exc: psycopg.Error, conn: psycopg.Connection) -> Exception:
        """What a failed attempt means: a server ERROR on a live connection rolled the
        statement's transaction back; anything else (a broken connection, a FATAL sent as
        the server ended the session) may have come after the commit."""
        if conn.broken or conn.closed or exc.sqlstate is None or (
                exc.diag.severity_nonlocalized not in (None, "ERROR")):
            if name in WRITES:
                return _Unsettled()
            return _NotDone(StoreUnavailable(f"{self.where} is not reachable: {reason(exc)}",
                                             "unreachable"), retry=True)
        if isinstance(exc, pg_errors.SerializationFailure | pg_errors.DeadlockDetected):
            return _NotDone(StoreUnavailable(f"{self.where}: too many conflicts",
                                             "contention"), retry=True)
        if isinstance(exc, pg_errors.LockNotAvailable):  # a lock_timeout (ours, or the role's)
            return _NotDone(StoreUnavailable(f"{self.where}: a row stayed locked by another "
                                             "transaction", "contention"), retry=True,
                            locked=True)
        if isinstance(exc, pg_errors.QueryCanceled):
            if name in WRITES:  # it may have waited on another writer of the same row, one
                return _Unsettled()  # whose outcome is unknown: a retry sees what it did
            return _NotDone(StoreUnavailable(
                f"{self.where} did not answer within {self._timeout:g} s: {reason(exc)}",
                "deadline"))
        if isinstance(exc, pg_errors.ReadOnlySqlTransaction | pg_errors.InsufficientPrivilege):
            return _NotDone(StoreUnavailable(f"{self.where} refuses writes: {reason(exc)}",
                                             "read_only"))
        if not isinstance(exc, pg_errors.OperationalError | pg_errors.InternalError):
            # A pooler's or an engine's own refusal, a prepared statement gone: logged as
            # the surprise it is, answered as a 503, never a 500.
            log.error("%s: %s failed: %s", self.where, name, reason(exc))
        return _NotDone(StoreUnavailable(f"{self.where} refused the {name}: {reason(exc)}",
                                         "refused"))

    def create(self, plant: Plant, webhooks: Sequence[str] = ()) -> tuple[Plant, bool]:
        call = _NewPlant(plant, tuple(webhooks), time.monotonic() + self._timeout)
        try:
            return self._creates.submit(call)
        except _Alone as alone:  # in this thread, outside the batches: it holds none back
            call.alone, call.unsettled = True, alone.unsettled
            answer = self._create_batch([call])[0]
            if isinstance(answer, Exception):
                raise answer from None
            return answer

    def _create_batch(self, calls: list["_NewPlant"]) -> list[tuple[Plant, bool] | Exception]:
        """Answer each create of a batch as if it had run alone, in the batch's order: the
        first create of an id is sent, and a later one in the batch is settled against
        what the first got (a replay of it, or a conflict). A call whose deadline passed
        while it queued is answered not done: it was never sent. When one member could
        decide the batch's fate (a row of its id locked, a refusal: an operator's trigger),
        each member runs alone instead (:class:`_Alone`)."""
        first: dict[int, _NewPlant] = {}
        now = time.monotonic()
        for call in calls:
            if call.deadline > now:
                first.setdefault(call.plant.id, call)
        outcome: dict[int, tuple[Plant, bool] | Exception] = {}
        try:
            if first:
                for plant_id, (created, name, tag) in self._create_rows(first).items():
                    plant = first[plant_id].plant
                    outcome[plant_id] = (plant, True) if created else _after(
                        (_plant(plant_id, name, tag), False), plant)
        except _Alone as alone:
            return [_Alone(alone.unsettled) for _ in calls]
        except StoreUnavailable as exc:
            if exc.cause == "refused" and not exc.unknown and len(calls) > 1:
                return [_Alone() for _ in calls]
            for plant_id, call in first.items():
                outcome[plant_id] = _after(exc, call.plant)
        return [StoreUnavailable(f"{self.where} did not answer within {self._timeout:g} s",
                                 "deadline", unknown=call.unsettled) if call.deadline <= now
                else outcome[call.plant.id] if first[call.plant.id] is call
                else _after(outcome[call.plant.id], call.plant) for call in calls]

    def _create_rows(self, sent: dict[int, "_NewPlant"],
                     ) -> dict[int, tuple[bool, bytes, bytes | None]]:
        """Run the create statement for ``sent`` (by id); (created, name, tag) by id."""
        calls = list(sent.values())
        owed = [delivery for call in calls if call.webhooks
                for delivery in deliveries_for(call.plant, call.webhooks)]
        # A batch, even of one, waits BATCH_LOCK_WAIT at most for a row another transaction
        # holds (then its members go alone); a create alone waits as long as it may.
        lock_timeout = None if calls[0].alone else BATCH_LOCK_WAIT
        if len(calls) == 1:
            query, plant = "create_one", calls[0].plant
            params = {"id": plant.id, "name": plant.name.encode(), "tag": _utf8(plant.tag),
                      "delivery_ids": [d.id for d in owed], "urls": [d.url for d in owed],
                      "body": owed[0].body if owed else b"", "lock_timeout": lock_timeout}
        else:
            query = "create"
            params = {"ids": list(sent), "names": [call.plant.name.encode() for call in calls],
                      "tags": [_utf8(call.plant.tag) for call in calls],
                      "delivery_ids": [d.id for d in owed],
                      "delivery_plants": [d.plant_id for d in owed],
                      "urls": [d.url for d in owed], "bodies": [d.body for d in owed],
                      "lock_timeout": lock_timeout}
        op = _Operation(min(call.deadline for call in calls),
                        unsettled=any(call.unsettled for call in calls))
        for _ in range(3):
            rows = self._run(query, params, lambda cur: cur.fetchall(), op)
            if rows and rows[0][0] is None:  # the data is on another server or timeline
                self._rebase(op)  # than its clock
                continue
            return {plant_id: (created, name, tag) for plant_id, created, name, tag in rows}
        raise StoreUnavailable(f"{self.where}: its clock keeps moving", "contention",
                               unknown=op.unsettled)

    def create_many(self, plants: Sequence[Plant]) -> list[tuple[Plant, bool]]:
        """Transactions of up to BATCH_LIMIT plants (the slots of positions a transaction
        has), committed one after another in order: each copies its plants straight into
        the table (COPY, binary) when none is stored, else into a temporary table and
        creates them from it with one statement (query import). A repeated id ends a
        transaction's plants before it, so the next one finds it stored. A conflict rolls
        its transaction back, and the plants before it are created again without it. Each
        transaction is tried again as a create is (a replay settles one whose commit is
        unknown); an error leaves the ones before it committed."""
        done: list[tuple[Plant, bool]] = []
        direct = True  # until a transaction replays: then the next goes the general way
        while len(done) < len(plants):
            at, ids = len(done), set()
            for plant in plants[at:at + BATCH_LIMIT]:
                if plant.id in ids:
                    break
                ids.add(plant.id)
            made, conflict = self._import(plants[at:at + len(ids)], direct)
            direct = all(created for _, created in made)
            done += made
            if conflict is not None:
                raise BatchConflict(conflict, done)
        return done

    def _import(self, plants: Sequence[Plant], direct: bool,
                ) -> tuple[list[tuple[Plant, bool]], Plant | None]:
        """One transaction of create_many: the outcomes of the plants it created or
        replayed, and the stored plant of the first conflict, if one cut it short."""
        op = _Operation(time.monotonic() + self._timeout)
        conflict, stale = None, 0
        while plants:
            try:
                rows = self._run("import", {}, lambda cur: None, op,
                                 functools.partial(_copy_and_create, plants=plants,
                                                   direct=direct))
            except _Stale:
                stale += 1
                if stale == 3:
                    raise StoreUnavailable(f"{self.where}: its clock keeps moving",
                                           "contention", unknown=op.unsettled) from None
                self._rebase(op)
                continue
            except _Conflicting as exc:
                plants, conflict = plants[:exc.slot], exc.stored
                continue
            replayed = {slot for slot, *_ in rows}
            return [(plant, slot not in replayed) for slot, plant in enumerate(plants)], conflict
        return [], conflict

    def update(self, plant: Plant,
               condition: Condition | None = None) -> tuple[Versioned, bool] | None:
        """Read, decide, then compare and set (the update query): a plant changed between
        the read and the write is read again and decided anew, within the deadline."""
        op = _Operation(time.monotonic() + self._timeout)
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
            params = {"id": plant.id, "name": plant.name.encode(), "tag": _utf8(plant.tag),
                      "was_position": version[0], "was_rev": version[1]}
            written = self._run("update", params, lambda cur: cur.fetchone(), op)
            if written is not None:
                return Versioned(plant, _version(*written)), changes
            self._check_deadline(op, "update")

    def delete(self, plant_id: int, condition: Condition | None = None) -> bool:
        op = _Operation(time.monotonic() + self._timeout)
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
                      "was_rev": None if version is None else version[1]}
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

    def _read(self, plant_id: int, op: "_Operation") -> tuple[Plant, tuple[int, int]] | None:
        """The plant and its (position, revision)."""
        row = self._run("get", {"id": plant_id}, lambda cur: cur.fetchone(), op)
        return None if row is None else (_plant(plant_id, *row[:2]), (row[2], row[3]))

    def _check_deadline(self, op: "_Operation", name: str) -> None:
        """A conditional write that keeps finding the plant changed ends by its deadline."""
        if time.monotonic() >= op.deadline:
            if op.unsettled:
                raise self._unknown(name)
            raise StoreUnavailable(f"{self.where}: the plant kept changing", "contention")

    def fetch(self, plant_id: int) -> Versioned | None:
        found = self._read(plant_id, _Operation(time.monotonic() + self._timeout))
        return None if found is None else Versioned(found[0], _version(*found[1]))

    def page(self, start: int, limit: int,
             tag: str | None = None) -> tuple[list[Plant], int | None]:
        op = _Operation(time.monotonic() + self._timeout)
        if tag is None:
            rows = self._page_rows("page", {"start": start, "limit": limit + 1}, op)
        else:
            rows = self._tag_rows(tag.encode(), start, limit + 1, op)
        plants = [_plant(plant_id, name, tag) for plant_id, name, tag, _ in rows[:limit]]
        return plants, rows[limit][3] if len(rows) > limit else None

    def _tag_rows(self, tag: bytes, start: int, wanted: int, op: "_Operation") -> list[Any]:
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

    def _page_rows(self, query: str, params: dict[str, Any], op: "_Operation") -> list[Any]:
        for _ in range(3):
            rows: list[Any] = self._run(query, params, lambda cur: cur.fetchall(), op)
            if not rows or rows[-1][0] is not None:
                return rows
            self._rebase(op)
        raise StoreUnavailable(f"{self.where}: its clock keeps moving", "contention")

    def _rebase(self, op: "_Operation") -> None:
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
        with self._waiting_lock:
            waiting = len(self._waiting)
            oldest = min(self._waiting.values(), default=None)
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


@dataclasses.dataclass(slots=True)
class _NewPlant:
    """A create waiting for its batch; or, ``alone``, running by itself after its batch
    could not answer for it (``unsettled``: when an attempt of that batch may have
    committed)."""
    plant: Plant
    webhooks: tuple[str, ...]
    deadline: float  # monotonic
    alone: bool = False
    unsettled: bool = False


def _after(earlier: "tuple[Plant, bool] | Exception", plant: Plant,
           ) -> "tuple[Plant, bool] | Exception":
    """What a create of ``plant`` answers right after a create of its id that answered
    ``earlier``: the same plant stored is a replay, another a conflict; a store's error
    repeats (an exception of its own: each caller raises it in its own thread)."""
    if isinstance(earlier, StoreUnavailable):
        return StoreUnavailable(str(earlier), earlier.cause, unknown=earlier.unknown)
    if isinstance(earlier, Conflict):
        return Conflict(earlier.stored) if earlier.stored != plant else (earlier.stored, False)
    if isinstance(earlier, Exception):
        return earlier
    try:
        return replay(earlier[0], plant), False
    except Conflict as exc:
        return exc


class _Stale(Exception):
    """The import found the data on another server or timeline than its clock."""


class _Conflicting(Exception):
    """The import's plant at ``slot`` is stored as ``stored``, another plant."""

    def __init__(self, slot: int, stored: Plant) -> None:
        super().__init__()
        self.slot, self.stored = slot, stored


def _copy_and_create(conn: psycopg.Connection, plants: Sequence[Plant], direct: bool,
                     ) -> list[tuple[int, bytes, bytes | None, bool]]:
    """The transaction of one import batch: its rows (those not created), or _Stale or
    _Conflicting, and then nothing of it is committed. ``direct``: first try the plants
    straight into the table (import_position, import_direct, in a savepoint), which a
    stored id fails; then, or else, through the temporary table (import_table,
    import_copy, import). Not prepared: statements run once a thousand plants."""
    with conn.transaction(), conn.cursor() as cur:
        if direct:
            row = cur.execute(QUERIES["import_position"], prepare=False).fetchone()
            if row is None:
                raise _Stale()
            first: int = row[0]
            try:
                with conn.transaction(), cur.copy(QUERIES["import_direct"]) as copy:
                    copy.set_types(["int8", "bytea", "bytea", "int8"])
                    for slot, plant in enumerate(plants):
                        copy.write_row((plant.id, plant.name.encode(), _utf8(plant.tag),
                                        first + slot))
                return []
            except pg_errors.UniqueViolation:
                pass  # an id is stored (a resumed import): the general way, same positions
        cur.execute(QUERIES["import_table"], prepare=False)
        with cur.copy(QUERIES["import_copy"]) as copy:
            copy.set_types(["int4", "int8", "bytea", "bytea"])
            for slot, plant in enumerate(plants):
                copy.write_row((slot, plant.id, plant.name.encode(), _utf8(plant.tag)))
        rows: list[tuple[int, bytes, bytes | None, bool]] = cur.execute(
            QUERIES["import"], prepare=False).fetchall()
        if rows and rows[-1][0] is None:
            raise _Stale()
        for slot, name, tag, same in rows:
            if not same:
                raise _Conflicting(slot, _plant(plants[slot].id, name, tag))
    return rows


def _version(position: int, rev: int) -> str:
    """A plant's version: its create's position (a re-create has a new one) and revision
    (counted by migration 0007's trigger)."""
    return f"{position}.{rev}"


def _utf8(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _delivery(delivery_id: str, plant_id: int, url: str, body: bytes, attempts: int,
              error: str | None, dead: bool) -> Delivery:
    return Delivery(delivery_id, plant_id, url, bytes(body), attempts, error, dead)


def _plant(plant_id: int, name: bytes, tag: bytes | None) -> Plant:
    return Plant(plant_id, bytes(name).decode(), None if tag is None else bytes(tag).decode())
