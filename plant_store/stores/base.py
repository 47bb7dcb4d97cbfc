"""What every store promises, whatever keeps the data.

A store maps an int64 id to a plant. ``create`` is idempotent: the same plant again is a
replay, a different plant under a stored id is a :class:`Conflict`. ``update`` is too: a
plant already as asked is left alone, whatever its condition says (a retried update). A
store that cannot write raises :class:`StoreUnavailable` and keeps nothing of the failed
write. Beside the plants it keeps the webhook outbox, so a create and the deliveries it
owes are one write.

Every read shows only what is durable: a read reflects every write acknowledged before it
began, and a write it reflects is durable (a store that acknowledges after an fsync makes
its reads wait for the fsync that covers what they show).
"""

import abc
from collections.abc import Iterator, Sequence

from plant_store.events import Events
from plant_store.stores.records import Delivery, Plant, Preconditions, Versioned


class StoreError(Exception):
    """The store cannot be opened or used; the message is meant for the operator."""


class DataDirError(StoreError):
    """The data directory, or a file in it, cannot be used (missing, read-only, denied):
    the operator's fix is to ``data_dir``, so the command line names that setting."""


class StoreUnavailable(StoreError):
    """A read or write failed for a reason outside the request (disk full, I/O error).
    ``cause`` is one word of :data:`CAUSES`, for the metrics (the message is for people).
    ``unknown``: a write whose outcome is not known (it may have been done: the connection
    broke after it was sent), as opposed to one known not done."""

    def __init__(self, message: str, cause: str = "io", *, unknown: bool = False) -> None:
        super().__init__(message)
        self.cause = cause
        self.unknown = unknown


# Why a store refused: "io" a failed write, "fsync" a failed fsync, "broken" the JSON file
# refuses until a restart (replaced, deleted, a failed cut-back), "unreachable" no database
# connection, "read_only" a database that refuses writes, "contention" too many conflicts,
# "deadline" no answer in time, "unconfirmed" a write whose outcome stayed unknown (a
# broken connection, a synchronous standby's confirmation cancelled), "refused" any other
# refusal of the database or a pooler, "busy" every database connection in use.
CAUSES = ("io", "fsync", "broken", "unreachable", "read_only", "contention", "deadline",
          "unconfirmed", "refused", "busy")


class Conflict(StoreError):
    """The id is stored with another name or tag."""

    def __init__(self, stored: Plant) -> None:
        super().__init__(f"plant {stored.id} is stored with a different name or tag")
        self.stored = stored


class PreconditionFailed(StoreError):
    """A conditional update or delete found the plant's version refused by ``header``
    (If-Match or If-None-Match); nothing was written."""

    def __init__(self, stored: Plant, header: str) -> None:
        super().__init__(f"plant {stored.id} is not as {header} expects")
        self.stored = stored
        self.header = header


class BatchConflict(Conflict):
    """A :meth:`Store.create_many` stopped at a plant whose id is stored with another name
    or tag: ``done`` holds the outcomes of the plants before it, all stored; none after it
    was tried."""

    def __init__(self, stored: Plant, done: "list[tuple[Plant, bool]]") -> None:
        super().__init__(stored)
        self.done = done


def replay(stored: Plant, plant: Plant) -> Plant:
    """Settle a create for an id that is already stored: same plant or conflict."""
    if stored != plant:
        raise Conflict(stored)
    return stored


def needs_update(stored: Versioned, plant: Plant, condition: Preconditions | None) -> bool:
    """Whether an update of ``stored`` to ``plant`` writes: not when it is already done
    (RFC 9110 13.1.1: a retried update answers as the first did); PreconditionFailed
    when ``condition`` refuses the stored version (:meth:`Preconditions.refusal`)."""
    equal = stored.plant == plant
    if condition is not None:
        header = condition.refusal(stored.version, equal)
        if header is not None:
            raise PreconditionFailed(stored.plant, header)
    return not equal


def check_delete(stored: Versioned, condition: Preconditions | None) -> None:
    """PreconditionFailed when ``condition`` refuses the version a delete would remove."""
    if condition is not None:
        header = condition.refusal(stored.version)
        if header is not None:
            raise PreconditionFailed(stored.plant, header)


class PlantStore(abc.ABC):
    """The plant operations: plants by id, in creation order, each with its version
    (contract: tests/support/suites/plant_store_contract.py, run on every store). A write's
    preconditions are checked under the store's lock or row lock, so no other change comes
    between the check and the write."""

    @abc.abstractmethod
    def create(self, plant: Plant, webhooks: Sequence[str] = ()) -> tuple[Plant, bool]:
        """Store ``plant``; return the stored plant and whether this call created it. A
        create (not a replay) also owes a delivery of the NewPlant to each webhook URL."""

    def create_many(self, plants: Sequence[Plant]) -> list[tuple[Plant, bool]]:
        """Store ``plants`` in order, as a ``create`` each (without webhooks: for an
        import, where a plant is moved, not new), and return each one's outcome once all
        are durable. A store overrides it to make many plants one write (one fsync, one
        transaction), which is what makes an import fast.
        A conflict stops it there: :class:`BatchConflict`. A StoreUnavailable leaves
        some prefix of ``plants`` stored, perhaps none: calling again with the same plants
        settles it (the stored ones are replays)."""
        done: list[tuple[Plant, bool]] = []
        for plant in plants:
            try:
                done.append(self.create(plant))
            except Conflict as exc:
                raise BatchConflict(exc.stored, done) from None
        return done

    @abc.abstractmethod
    def update(self, plant: Plant,
               condition: Preconditions | None = None) -> tuple[Versioned, bool] | None:
        """Replace the name and tag of the plant stored under ``plant.id``, keeping its place
        in the creation order; return the stored plant with its version and whether this
        call wrote, or None when no plant has that id (an update never creates). See
        :func:`needs_update`."""

    @abc.abstractmethod
    def delete(self, plant_id: int, condition: Preconditions | None = None) -> bool:
        """Remove the plant; False when no plant has that id. The id may be created again.
        PreconditionFailed (the plant kept) when ``condition`` refuses it."""

    @abc.abstractmethod
    def fetch(self, plant_id: int) -> Versioned | None:
        """The plant stored under ``plant_id``, if any, with its version."""

    def get(self, plant_id: int) -> Plant | None:
        """The plant stored under ``plant_id``, if any."""
        found = self.fetch(plant_id)
        return None if found is None else found.plant

    @abc.abstractmethod
    def page(self, start: int, limit: int,
             tag: str | None = None) -> tuple[list[Plant], int | None]:
        """Up to ``limit`` plants in creation order from position ``start`` (only those
        tagged exactly ``tag``, unless it is None), and the position of the next page, or
        None when no more plants follow. Costs the page's length, not the store's size."""

    def pages(self, size: int, limit: int | None = None) -> Iterator[list[Plant]]:
        """Every plant in creation order (at most ``limit`` of them), ``size`` at a time:
        the one walk of a whole store, for an export and for ``plants list``."""
        start: int | None = 0
        while start is not None and limit != 0:
            plants, start = self.page(start, size if limit is None else min(size, limit))
            yield plants
            limit = None if limit is None else limit - len(plants)

    @abc.abstractmethod
    def __len__(self) -> int:
        """How many plants are stored."""



class OutboxStore(abc.ABC):
    """The outbox protocol: the webhook deliveries creates owe, kept beside the plants, and
    how workers take them lane by lane (contract:
    tests/support/suites/outbox_store_contract.py, run on every store)."""

    @abc.abstractmethod
    def deliveries(self, *, dead: bool = False) -> list[Delivery]:
        """Webhook deliveries still owed (or, with ``dead``, given up on), oldest first."""

    @abc.abstractmethod
    def settle(self, delivery_id: str, state: str, error: str | None = None,
               retry_in: float = 0.0) -> None:
        """Record an outcome of a delivery (one of ``outbox.STATES``), its attempt counted
        here unless begin_attempt counted it; KeyError if unknown.
        ``retry_in``: after a failure, seconds before any worker may try it again (a store
        that one process owns leaves that to its worker)."""

    def outbox(self) -> list[Delivery]:
        """Every delivery, those owed (due or not) then the dead letters, each oldest
        first: what 'plant-store webhooks list' shows."""
        return self.deliveries() + self.deliveries(dead=True)

    def retry_dead(self, delivery_ids: Sequence[str] | None = None) -> list[str]:
        """Move dead letters (all, or those named) back to the outbox, their attempts reset,
        and return their ids. When a named id is not a dead letter, move none and raise
        KeyError naming it: an operator's retry is done whole or not at all. A store several
        instances share does it in one transaction, so two retries at once move each dead
        letter once, and the instances' workers send it once (their lane leases)."""
        dead = [d.id for d in self.deliveries(dead=True)]
        if delivery_ids is not None:
            missing = sorted(set(delivery_ids) - set(dead))
            if missing:
                raise KeyError(missing[0])
            wanted = set(delivery_ids)
            dead = [i for i in dead if i in wanted]
        for delivery_id in dead:
            self.settle(delivery_id, "retry")
        return dead

    @abc.abstractmethod
    def outbox_counts(self) -> tuple[int, int]:
        """How many deliveries are owed, and how many are dead letters."""

    @abc.abstractmethod
    def lanes(self) -> list[str]:
        """The URLs whose oldest owed delivery may be sent now (not one another worker's
        lane holds, nor one waiting out a back-off the store keeps), each once. Costs the
        number of URLs, not the backlog."""

    @abc.abstractmethod
    def lane(self, url: str, limit: int) -> list[Delivery]:
        """Up to ``limit`` of the deliveries owed to ``url``, oldest first, ending before
        the first that may not be sent yet (so none is sent ahead of an older one)."""

    def hold_lane(self, url: str, lease: float) -> bool:
        """Take ``url``'s lane, or keep it, for ``lease`` seconds: only its holder sends to
        the URL. False when another worker holds it. Stores that one process owns have one
        worker: always True."""
        return True

    def free_lane(self, url: str) -> None:
        """Give the lane up before its lease ends."""

    def begin_attempt(self, delivery: Delivery, lease: float, max_attempts: int) -> int | None:
        """Count an attempt at ``delivery`` before it is made, keeping its lane for
        ``lease`` seconds more, and return its number (above ``max_attempts``: the delivery
        has had its tries, the last one's outcome never recorded); None when the lane is no
        longer this worker's. A store several workers share counts it here, atomically with
        the lease, so that no two workers both make the last try; one that a single worker
        owns counts it when the outcome is settled."""
        return delivery.attempts + 1



class Store(PlantStore, OutboxStore):
    """What every store promises (the module's docstring): the plant operations and the
    outbox protocol, one store's, and its readiness and end."""

    events = Events()  # a store that reports (wrote, compacted) is given its events when opened

    def check(self) -> None:
        """Raise :class:`StoreUnavailable`, saying why, unless the store can take writes
        now (readiness; the memory store always can)."""

    def close(self) -> None:
        """Release files, locks and connections; the store is unusable afterwards."""

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
