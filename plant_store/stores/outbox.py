"""The webhook outbox: deliveries owed to subscribers, kept by the store beside the plants
so that a create and the deliveries it owes are written together."""

import uuid
from dataclasses import dataclass, replace

import orjson

from plant_store.stores.base import Plant, kept

STATES = ("delivered", "failed", "dead", "retry")


@dataclass(frozen=True, slots=True)
class Delivery:
    id: str  # unique; receivers dedupe on it (delivery is at least once)
    plant_id: int
    url: str
    body: bytes  # the NewPlant JSON, exactly as it is sent and signed
    attempts: int = 0
    error: str | None = None
    dead: bool = False


def new_plant_json(plant: Plant) -> bytes:
    fields = {"id": plant.id, "name": plant.name}
    if plant.tag is not None:
        fields["tag"] = plant.tag
    return kept(orjson.dumps(fields))  # kept until delivered: see base.kept


def deliveries_for(plant: Plant, urls: tuple[str, ...]) -> list[Delivery]:
    body = new_plant_json(plant)
    return [Delivery(uuid.uuid4().hex, plant.id, url, body) for url in urls]


class Outbox:
    """Deliveries by id, in the order they were owed; not thread-safe (the store locks)."""

    def __init__(self) -> None:
        self._items: dict[str, Delivery] = {}

    def add(self, delivery: Delivery) -> None:
        self._items[delivery.id] = delivery

    def settle(self, delivery_id: str, state: str, error: str | None = None) -> Delivery:
        """Apply an outcome; return the delivery as it was (KeyError if unknown)."""
        before = self._items[delivery_id]
        if state == "delivered":
            del self._items[delivery_id]
        elif state == "retry":
            self._items[delivery_id] = replace(before, attempts=0, error=None, dead=False)
        else:
            self._items[delivery_id] = replace(
                before, attempts=before.attempts + 1, error=error, dead=state == "dead")
        return before

    def restore(self, before: Delivery) -> None:
        self._items[before.id] = before

    def remove(self, delivery_id: str) -> None:
        del self._items[delivery_id]

    def __contains__(self, delivery_id: str) -> bool:
        return delivery_id in self._items

    def list(self, *, dead: bool = False) -> list[Delivery]:
        return [d for d in self._items.values() if d.dead == dead]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self):
        return iter(self._items.values())
