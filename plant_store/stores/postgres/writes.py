"""Plants written: the row codec (a plant to its columns and back, the one place either is
done), creates batched so that concurrent ones share one statement and one commit, and bulk
import with COPY.

The store's own columns are bytea, so that what a client sent is what it gets back, byte
for byte.
"""

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence

import psycopg
from psycopg import errors as pg_errors

from plant_store.stores.base import BatchConflict, Conflict, StoreUnavailable, replay
from plant_store.stores.outbox import deliveries_for
from plant_store.stores.postgres.attempts import Alone, Operation, Run
from plant_store.stores.postgres.schema import QUERIES
from plant_store.stores.records import Delivery, Plant
from plant_store.util.concurrency import Batcher


def columns(plant: Plant) -> tuple[bytes, bytes | None]:
    """A plant's name and tag as its columns hold them."""
    return plant.name.encode(), None if plant.tag is None else plant.tag.encode()


def plant_of(plant_id: int, name: bytes, tag: bytes | None) -> Plant:
    """The plant a row's columns hold (psycopg answers a bytea as bytes or a memoryview)."""
    return Plant(plant_id, bytes(name).decode(), None if tag is None else bytes(tag).decode())


def version(position: int, rev: int, stamp: int) -> str:
    """A plant's version: its create's position (a re-create has a new one), its revision
    (counted by migration 0007's trigger) and its last write's random stamp (migration
    0008: a write after a restore never has a version a write before it had), as 16 hex
    digits. Three parts: never equal to an earlier release's "position.rev"."""
    return f"{position}.{rev}.{stamp & 0xFFFF_FFFF_FFFF_FFFF:016x}"


def delivery(delivery_id: str, plant_id: int, url: str, body: bytes, attempts: int,
             error: str | None, dead: bool) -> Delivery:
    """The delivery a row of the outbox holds."""
    return Delivery(delivery_id, plant_id, url, bytes(body), attempts, error, dead)


BATCH_LIMIT = 1024  # creates in one statement: positions leave 1024 slots a transaction
BATCHES_RUNNING = 1  # batches of creates under way at once, each on its own connection
BATCH_PATIENCE = 0.05  # seconds a create waits for a batch ahead before it leads its own
BATCH_LOCK_WAIT = "50ms"  # the most a batch waits for a locked row before each goes alone


@dataclasses.dataclass(slots=True)
class NewPlant:
    """A create waiting for its batch; or, ``alone``, running by itself after its batch
    could not answer for it (``unsettled``: when an attempt of that batch may have
    committed)."""
    plant: Plant
    webhooks: tuple[str, ...]
    deadline: float  # monotonic
    alone: bool = False
    unsettled: bool = False


class Creates(Batcher[NewPlant, tuple[Plant, bool]]):
    """Creates, batched: concurrent creates share one statement and one commit
    (:class:`~plant_store.util.concurrency.Batcher` says how calls are combined), and each
    is answered as if it had run alone.

    Invariants:

    1. Within a batch the first create of an id is sent; a later one is settled against what
       the first got (a replay of it, or a conflict), in the batch's order.
    2. A create whose deadline passed while it queued is answered not done: it was never sent.
    3. No member decides another's fate: when one could (a row of its id locked past
       BATCH_LOCK_WAIT, a refusal such as an operator's trigger), every member runs alone, at
       once, in its own thread; and when an attempt of the batch may have committed, a member
       that then fails alone says its outcome is unknown, never that it was not done.

    ``run`` runs a named query (the store's attempts), ``rebase`` moves the clock when the
    data is on another server or timeline.
    """

    def __init__(self, run: Run, rebase: Callable[[Operation], None], *, where: str,
                 timeout: float) -> None:
        super().__init__(self._answer, limit=BATCH_LIMIT, running=BATCHES_RUNNING,
                         patience=BATCH_PATIENCE)
        self._query = run
        self._rebase = rebase
        self._where = where
        self._timeout = timeout
        self._lock_wait = BATCH_LOCK_WAIT  # a test holding a batch at a row sets it longer

    def create(self, plant: Plant, webhooks: Sequence[str] = ()) -> tuple[Plant, bool]:
        call = NewPlant(plant, tuple(webhooks), time.monotonic() + self._timeout)
        try:
            return self.submit(call)
        except Alone as alone:  # in this thread, outside the batches: it holds none back
            call.alone, call.unsettled = True, alone.unsettled
            answer = self._answer([call])[0]
            if isinstance(answer, Exception):
                raise answer from None
            return answer

    def _answer(self, calls: list[NewPlant]) -> list[tuple[Plant, bool] | Exception]:
        """Each create of a batch answered as if it had run alone, in the batch's order
        (invariants 1 to 3 of the class)."""
        first: dict[int, NewPlant] = {}
        now = time.monotonic()
        for call in calls:
            if call.deadline > now:
                first.setdefault(call.plant.id, call)
        outcome: dict[int, tuple[Plant, bool] | Exception] = {}
        try:
            if first:
                for plant_id, (created, name, tag) in self._rows(first).items():
                    plant = first[plant_id].plant
                    outcome[plant_id] = (plant, True) if created else after(
                        (plant_of(plant_id, name, tag), False), plant)
        except Alone as alone:
            return [Alone(alone.unsettled) for _ in calls]
        except StoreUnavailable as exc:
            if exc.cause == "refused" and not exc.unknown and len(calls) > 1:
                return [Alone() for _ in calls]
            for plant_id, call in first.items():
                outcome[plant_id] = after(exc, call.plant)
        return [StoreUnavailable(f"{self._where} did not answer within {self._timeout:g} s",
                                 "deadline", unknown=call.unsettled) if call.deadline <= now
                else outcome[call.plant.id] if first[call.plant.id] is call
                else after(outcome[call.plant.id], call.plant) for call in calls]

    def _rows(self, sent: dict[int, NewPlant]) -> dict[int, tuple[bool, bytes, bytes | None]]:
        """Run the create statement for ``sent`` (by id); (created, name, tag) by id."""
        calls = list(sent.values())
        owed = [delivery for call in calls if call.webhooks
                for delivery in deliveries_for(call.plant, call.webhooks)]
        # A batch, even of one, waits BATCH_LOCK_WAIT at most for a row another transaction
        # holds (then its members go alone); a create alone waits as long as it may.
        lock_timeout = None if calls[0].alone else self._lock_wait
        if len(calls) == 1:
            query, plant = "create_one", calls[0].plant
            name, tag = columns(plant)
            params = {"id": plant.id, "name": name, "tag": tag,
                      "delivery_ids": [d.id for d in owed], "urls": [d.url for d in owed],
                      "body": owed[0].body if owed else b"", "lock_timeout": lock_timeout}
        else:
            query, written = "create", [columns(call.plant) for call in calls]
            params = {"ids": list(sent), "names": [name for name, _ in written],
                      "tags": [tag for _, tag in written],
                      "delivery_ids": [d.id for d in owed],
                      "delivery_plants": [d.plant_id for d in owed],
                      "urls": [d.url for d in owed], "bodies": [d.body for d in owed],
                      "lock_timeout": lock_timeout}
        op = Operation(min(call.deadline for call in calls),
                       unsettled=any(call.unsettled for call in calls))
        for _ in range(3):
            found = self._query(query, params, lambda cur: cur.fetchall(), op)
            if found and found[0][0] is None:  # the data is on another server or timeline
                self._rebase(op)  # than its clock
                continue
            return {plant_id: (created, name, tag) for plant_id, created, name, tag in found}
        raise StoreUnavailable(f"{self._where}: its clock keeps moving", "contention",
                               unknown=op.unsettled)


def after(earlier: tuple[Plant, bool] | Exception, plant: Plant,
          ) -> tuple[Plant, bool] | Exception:
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


class Stale(Exception):
    """The import found the data on another server or timeline than its clock."""


class Conflicting(Exception):
    """The import's plant at ``slot`` is stored as ``stored``, another plant."""

    def __init__(self, slot: int, stored: Plant) -> None:
        super().__init__()
        self.slot, self.stored = slot, stored


class BulkImport:
    """Bulk import (create_many): plants copied in with COPY, a transaction of up to
    BATCH_LIMIT at a time, for ``plant-store import`` and the like, where one create a plant
    would cost a round trip each.

    Invariants: transactions commit one after another, in the plants' order, so an error
    leaves exactly the ones before it committed; a transaction never holds two plants of one
    id (a repeated id ends it); a conflict rolls its transaction back and the plants before
    it are created again without it; a transaction whose commit is unknown is tried again and
    settled as a create is, by replay.
    ``run`` runs a named query (the store's attempts), ``rebase`` moves the clock when the
    data is on another server or timeline.
    """

    def __init__(self, run: Run, rebase: Callable[[Operation], None], *, where: str,
                 timeout: float) -> None:
        self._run = run
        self._rebase = rebase
        self._where = where
        self._timeout = timeout

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
        op = Operation(time.monotonic() + self._timeout)
        conflict, stale = None, 0
        while plants:
            try:
                found = self._run("import", {}, lambda cur: None, op,
                                  functools.partial(copy_and_create, plants=plants,
                                                    direct=direct))
            except Stale:
                stale += 1
                if stale == 3:
                    raise StoreUnavailable(f"{self._where}: its clock keeps moving",
                                           "contention", unknown=op.unsettled) from None
                self._rebase(op)
                continue
            except Conflicting as exc:
                plants, conflict = plants[:exc.slot], exc.stored
                continue
            replayed = {slot for slot, *_ in found}
            return [(plant, slot not in replayed) for slot, plant in enumerate(plants)], conflict
        return [], conflict


def copy_and_create(conn: psycopg.Connection, plants: Sequence[Plant], direct: bool,
                    ) -> list[tuple[int, bytes, bytes | None, bool]]:
    """The transaction of one import batch: its rows (those not created), or Stale or
    Conflicting, and then nothing of it is committed. ``direct``: first try the plants
    straight into the table (import_position, import_direct, in a savepoint), which a
    stored id fails; then, or else, through the temporary table (import_table,
    import_copy, import). Not prepared: statements run once a thousand plants."""
    with conn.transaction(), conn.cursor() as cur:
        if direct:
            row = cur.execute(QUERIES["import_position"], prepare=False).fetchone()
            if row is None:
                raise Stale()
            first: int = row[0]
            try:
                with conn.transaction(), cur.copy(QUERIES["import_direct"]) as copy:
                    copy.set_types(["int8", "bytea", "bytea", "int8"])
                    for slot, plant in enumerate(plants):
                        copy.write_row((plant.id, *columns(plant), first + slot))
                return []
            except pg_errors.UniqueViolation:
                pass  # an id is stored (a resumed import): the general way, same positions
        cur.execute(QUERIES["import_table"], prepare=False)
        with cur.copy(QUERIES["import_copy"]) as copy:
            copy.set_types(["int4", "int8", "bytea", "bytea"])
            for slot, plant in enumerate(plants):
                copy.write_row((slot, plant.id, *columns(plant)))
        found: list[tuple[int, bytes, bytes | None, bool]] = cur.execute(
            QUERIES["import"], prepare=False).fetchall()
        if found and found[-1][0] is None:
            raise Stale()
        for slot, name, tag, same in found:
            if not same:
                raise Conflicting(slot, plant_of(plants[slot].id, name, tag))
    return found
