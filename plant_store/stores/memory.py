"""Plants in a dict under a lock: fast, and gone when the process ends.

Each plant is kept as a ``(name, tag)`` tuple, not a Plant: the garbage collector stops
tracking tuples of strings, so a million stored plants do not make every full collection
walk a million objects.
"""

import threading

from plant_store.stores.base import Plant, Store, replay


class MemoryStore(Store):
    def __init__(self) -> None:
        self._plants: dict[int, tuple[str, str | None]] = {}
        self._order: list[int] = []  # ids in creation order: a page is one slice of it
        self._lock = threading.Lock()

    def create(self, plant: Plant) -> tuple[Plant, bool]:
        fields = (plant.name, plant.tag)
        with self._lock:
            stored = self._plants.setdefault(plant.id, fields)
            if stored is fields:
                self._order.append(plant.id)
        if stored is fields:
            return plant, True
        return replay(Plant(plant.id, *stored), plant), False

    def get(self, plant_id: int) -> Plant | None:
        stored = self._plants.get(plant_id)
        return None if stored is None else Plant(plant_id, *stored)

    def page(self, start: int, limit: int) -> tuple[list[Plant], int | None]:
        with self._lock:
            ids, end = self._order[start:start + limit], len(self._order)
            plants = [Plant(plant_id, *self._plants[plant_id]) for plant_id in ids]
        after = start + len(ids)
        return plants, after if after < end else None

    def __len__(self) -> int:
        return len(self._plants)
