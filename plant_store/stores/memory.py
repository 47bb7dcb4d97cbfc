"""Plants in a dict under a lock: fast, and gone when the process ends (the webhook
outbox too).

Opened for a data directory, it holds that directory's lock as the JSON-file store does:
two processes (say, two gunicorn workers) each with a memory store could both acknowledge
a different plant under one id, so one process per data directory holds for every store.

Each plant is kept as a ``(seq, rev, name, tag)`` tuple, not a Plant: the garbage collector
stops tracking tuples of ints and strings, so a million stored plants do not make every
full collection walk a million objects.

A plant's version is its create's sequence number (never reused: a re-create takes a new
one) and its revision (updates since the create), after a random name for this store:
the plants end with the process, and a client's ETag from an earlier process must not
name a plant of this one.
"""

import itertools
import secrets
import threading
from collections.abc import Sequence

from plant_store.stores import lock
from plant_store.stores.base import (
    Store,
    check_delete,
    needs_update,
    replay,
)
from plant_store.stores.order import CreationOrder, TagIndex
from plant_store.stores.outbox import Outbox, deliveries_for
from plant_store.stores.records import Delivery, Plant, Preconditions, Versioned


class MemoryStore(Store):
    """Plants in a dict under a lock, gone when the process ends."""

    def __init__(self, data_dir: str | None = None, *, lock_timeout: float = 0.0) -> None:
        """With ``data_dir``, hold its ``plants.lock`` (waiting up to ``lock_timeout``
        seconds for its owner) until :meth:`close`."""
        self._lock_fd = -1 if data_dir is None else lock.hold(data_dir, lock_timeout)
        self._plants: dict[int, tuple[int, int, str, str | None]] = {}
        self._epoch = secrets.token_hex(4)
        self._order = CreationOrder()
        self._tags = TagIndex()
        self._outbox = Outbox()
        self._lock = threading.Lock()

    def create(self, plant: Plant, webhooks: Sequence[str] = ()) -> tuple[Plant, bool]:
        plant_id, name, tag = plant
        with self._lock:
            stored = self._plants.get(plant_id)
            if stored is None:
                seq = self._order.append(plant_id)
                self._plants[plant_id] = (seq, 0, name, tag)
                if tag is not None:
                    self._tags.append(tag, seq, plant_id)
                if webhooks:
                    for delivery in deliveries_for(plant, tuple(webhooks)):
                        self._outbox.add(delivery)
                return plant, True
        return replay(Plant(plant_id, *stored[2:]), plant), False

    def update(self, plant: Plant,
               condition: Preconditions | None = None) -> tuple[Versioned, bool] | None:
        with self._lock:
            stored = self._plants.get(plant.id)
            if stored is None:
                return None
            seq, rev, _, tag = stored
            if not needs_update(self._versioned(plant.id, stored), plant, condition):
                return Versioned(plant, self._version(seq, rev)), False
            self._plants[plant.id] = (seq, rev + 1, plant.name, plant.tag)
            self._tags.remove(tag, seq)
            self._tags.add(plant.tag, seq, plant.id)
        return Versioned(plant, self._version(seq, rev + 1)), True

    def delete(self, plant_id: int, condition: Preconditions | None = None) -> bool:
        with self._lock:
            stored = self._plants.get(plant_id)
            if stored is None:
                return False
            check_delete(self._versioned(plant_id, stored), condition)
            del self._plants[plant_id]
            self._order.remove(stored[0])
            self._tags.remove(stored[3], stored[0])
        return True

    def fetch(self, plant_id: int) -> Versioned | None:
        stored = self._plants.get(plant_id)
        return None if stored is None else self._versioned(plant_id, stored)

    def get(self, plant_id: int) -> Plant | None:
        stored = self._plants.get(plant_id)
        return None if stored is None else Plant(plant_id, *stored[2:])

    def _versioned(self, plant_id: int, stored: tuple[int, int, str, str | None]) -> Versioned:
        return Versioned(Plant(plant_id, *stored[2:]), self._version(*stored[:2]))

    def _version(self, seq: int, rev: int) -> str:
        return f"{self._epoch}.{seq}.{rev}"

    def page(self, start: int, limit: int,
             tag: str | None = None) -> tuple[list[Plant], int | None]:
        with self._lock:
            entries = (self._order.page(start, limit) if tag is None
                       else self._tags.page(tag, start, limit))
            plants = [Plant(plant_id, *self._plants[plant_id][2:])
                      for _, plant_id in entries[:limit]]
        return plants, entries[limit][0] if len(entries) > limit else None

    def __len__(self) -> int:
        return len(self._plants)

    def deliveries(self, *, dead: bool = False) -> list[Delivery]:
        with self._lock:
            return self._outbox.list(dead=dead)

    def settle(self, delivery_id: str, state: str, error: str | None = None,
               retry_in: float = 0.0) -> None:
        with self._lock:
            self._outbox.settle(delivery_id, state, error)

    def outbox_counts(self) -> tuple[int, int]:
        with self._lock:
            return self._outbox.counts()

    def lanes(self) -> list[str]:
        with self._lock:
            return self._outbox.urls()

    def lane(self, url: str, limit: int) -> list[Delivery]:
        with self._lock:
            return list(itertools.islice(self._outbox.queue(url), limit))

    def close(self) -> None:
        with self._lock:
            if self._lock_fd >= 0:
                lock.release(self._lock_fd)
                self._lock_fd = -1
