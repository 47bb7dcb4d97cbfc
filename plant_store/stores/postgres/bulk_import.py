"""Bulk import (create_many): plants copied in with COPY, a transaction of up to
BATCH_LIMIT at a time, for ``plant-store import`` and the like, where one create a plant
would cost a round trip each.

Invariants: transactions commit one after another, in the plants' order, so an error
leaves exactly the ones before it committed; a transaction never holds two plants of one
id (a repeated id ends it); a conflict rolls its transaction back and the plants before
it are created again without it; a transaction whose commit is unknown is tried again and
settled as a create is, by replay.
"""

import functools
import time
from collections.abc import Callable, Sequence

import psycopg
from psycopg import errors as pg_errors

from plant_store.stores.base import BatchConflict, Plant, StoreUnavailable
from plant_store.stores.postgres import rows
from plant_store.stores.postgres.attempts import Operation, Run
from plant_store.stores.postgres.creates import BATCH_LIMIT
from plant_store.stores.postgres.queries import QUERIES


class Stale(Exception):
    """The import found the data on another server or timeline than its clock."""


class Conflicting(Exception):
    """The import's plant at ``slot`` is stored as ``stored``, another plant."""

    def __init__(self, slot: int, stored: Plant) -> None:
        super().__init__()
        self.slot, self.stored = slot, stored


class BulkImport:
    """``run`` runs a named query (the store's attempts), ``rebase`` moves the clock when
    the data is on another server or timeline."""

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
                        copy.write_row((plant.id, plant.name.encode(), rows.utf8(plant.tag),
                                        first + slot))
                return []
            except pg_errors.UniqueViolation:
                pass  # an id is stored (a resumed import): the general way, same positions
        cur.execute(QUERIES["import_table"], prepare=False)
        with cur.copy(QUERIES["import_copy"]) as copy:
            copy.set_types(["int4", "int8", "bytea", "bytea"])
            for slot, plant in enumerate(plants):
                copy.write_row((slot, plant.id, plant.name.encode(), rows.utf8(plant.tag)))
        found: list[tuple[int, bytes, bytes | None, bool]] = cur.execute(
            QUERIES["import"], prepare=False).fetchall()
        if found and found[-1][0] is None:
            raise Stale()
        for slot, name, tag, same in found:
            if not same:
                raise Conflicting(slot, rows.plant(plants[slot].id, name, tag))
    return found
