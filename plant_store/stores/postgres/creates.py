"""Creates, batched: concurrent creates share one statement and one commit (batches.py
says how calls are combined), and each is answered as if it had run alone.

Invariants:

1. Within a batch the first create of an id is sent; a later one is settled against what
   the first got (a replay of it, or a conflict), in the batch's order.
2. A create whose deadline passed while it queued is answered not done: it was never sent.
3. No member decides another's fate: when one could (a row of its id locked past
   BATCH_LOCK_WAIT, a refusal such as an operator's trigger), every member runs alone, at
   once, in its own thread; and when an attempt of the batch may have committed, a member
   that then fails alone says its outcome is unknown, never that it was not done.
"""

import dataclasses
import time
from collections.abc import Callable, Sequence

from plant_store.stores.base import Conflict, Plant, StoreUnavailable, replay
from plant_store.stores.outbox import deliveries_for
from plant_store.stores.postgres import rows
from plant_store.stores.postgres.attempts import Alone, Operation, Run
from plant_store.stores.postgres.batches import Batcher

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
    """The store's creates: ``run`` runs a named query (the store's attempts), ``rebase``
    moves the clock when the data is on another server or timeline."""

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
        (invariants 1 to 3 of the module)."""
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
                        (rows.plant(plant_id, name, tag), False), plant)
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
            params = {"id": plant.id, "name": plant.name.encode(), "tag": rows.utf8(plant.tag),
                      "delivery_ids": [d.id for d in owed], "urls": [d.url for d in owed],
                      "body": owed[0].body if owed else b"", "lock_timeout": lock_timeout}
        else:
            query = "create"
            params = {"ids": list(sent), "names": [call.plant.name.encode() for call in calls],
                      "tags": [rows.utf8(call.plant.tag) for call in calls],
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
