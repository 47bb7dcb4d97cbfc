"""The webhook outbox: deliveries owed to subscribers, kept by the store beside the plants
so that a create and the deliveries it owes are written together."""

import uuid
from collections.abc import Iterator
from dataclasses import replace

from plant_store.stores.records import Delivery, Plant, new_plant_json

STATES = ("delivered", "failed", "dead", "retry")


def deliveries_for(plant: Plant, urls: tuple[str, ...]) -> list[Delivery]:
    body = new_plant_json(plant)
    return [Delivery(uuid.uuid4().hex, plant.id, url, body) for url in urls]


class Outbox:
    """Deliveries by id, in the order they were owed, and each URL's queue of those still
    owed (not dead), so that a lane reads its URL's next deliveries without looking at any
    other URL's backlog; not thread-safe (the store locks).

    Invariant: a delivery is in its URL's queue exactly when it is in the outbox and not
    dead. A dead letter an operator retries, or an outcome whose write failed and was undone,
    joins the end of its URL's queue.
    """

    def __init__(self) -> None:
        self._items: dict[str, Delivery] = {}
        self._queues: dict[str, dict[str, None]] = {}  # URL -> ids owed, oldest first
        self._dead = 0

    def add(self, delivery: Delivery) -> None:
        self._put(delivery)

    def settle(self, delivery_id: str, state: str, error: str | None = None) -> Delivery:
        """Apply an outcome; return the delivery as it was (KeyError if unknown)."""
        before = self._items[delivery_id]
        if state == "delivered":
            self.remove(delivery_id)
        elif state == "retry":
            self._put(replace(before, attempts=0, error=None, dead=False))
        else:
            self._put(replace(before, attempts=before.attempts + 1, error=error,
                              dead=state == "dead"))
        return before

    def restore(self, before: Delivery) -> None:
        self._put(before)

    def remove(self, delivery_id: str) -> None:
        self._unqueue(self._items.pop(delivery_id))

    def urls(self) -> list[str]:
        """The URLs owed a delivery (not counting dead letters)."""
        return list(self._queues)

    def queue(self, url: str) -> Iterator[Delivery]:
        """The deliveries owed to ``url``, oldest first."""
        return (self._items[i] for i in self._queues.get(url, ()))

    def _put(self, delivery: Delivery) -> None:
        before = self._items.get(delivery.id)
        if before is not None and before.dead != delivery.dead:
            self._unqueue(before)
        self._items[delivery.id] = delivery
        if delivery.dead:
            self._dead += before is None or not before.dead
        else:
            self._queues.setdefault(delivery.url, {})[delivery.id] = None

    def _unqueue(self, delivery: Delivery) -> None:
        if delivery.dead:
            self._dead -= 1
            return
        queue = self._queues[delivery.url]
        del queue[delivery.id]
        if not queue:
            del self._queues[delivery.url]

    def __contains__(self, delivery_id: str) -> bool:
        return delivery_id in self._items

    def list(self, *, dead: bool = False) -> list[Delivery]:
        return [d for d in self._items.values() if d.dead == dead]

    def counts(self) -> tuple[int, int]:
        """Deliveries owed, and dead letters."""
        return len(self._items) - self._dead, self._dead

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Delivery]:
        return iter(self._items.values())
