"""Plants in a dict under a lock: fast, and gone when the process ends."""

import threading

from plant_store.stores.base import Plant, Store, replay


class MemoryStore(Store):
    def __init__(self) -> None:
        self._plants: dict[int, Plant] = {}
        self._lock = threading.Lock()

    def create(self, plant: Plant) -> tuple[Plant, bool]:
        with self._lock:
            stored = self._plants.setdefault(plant.id, plant)
        if stored is plant:
            return plant, True
        return replay(stored, plant), False

    def get(self, plant_id: int) -> Plant | None:
        return self._plants.get(plant_id)

    def __len__(self) -> int:
        return len(self._plants)
