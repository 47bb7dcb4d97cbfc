"""What every store promises, whatever keeps the data.

A store maps an int64 id to a plant. ``create`` is idempotent: the same plant again is a
replay, a different plant under a stored id is a :class:`Conflict`. A store that cannot
write raises :class:`StoreUnavailable` and keeps nothing of the failed write.
"""

import abc
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Plant:
    id: int
    name: str
    tag: str | None = None


class StoreError(Exception):
    """The store cannot be opened or used; the message is meant for the operator."""


class StoreUnavailable(StoreError):
    """A read or write failed for a reason outside the request (disk full, I/O error)."""


class Conflict(StoreError):
    """The id is stored with another name or tag."""

    def __init__(self, stored: Plant) -> None:
        super().__init__(f"plant {stored.id} is stored with a different name or tag")
        self.stored = stored


def replay(stored: Plant, plant: Plant) -> Plant:
    """Settle a create for an id that is already stored: same plant or conflict."""
    if stored != plant:
        raise Conflict(stored)
    return stored


class Store(abc.ABC):
    @abc.abstractmethod
    def create(self, plant: Plant) -> tuple[Plant, bool]:
        """Store ``plant``; return the stored plant and whether this call created it."""

    @abc.abstractmethod
    def get(self, plant_id: int) -> Plant | None:
        """The plant stored under ``plant_id``, if any."""

    @abc.abstractmethod
    def page(self, start: int, limit: int) -> tuple[list[Plant], int | None]:
        """Up to ``limit`` plants in creation order from position ``start``, and the
        position of the next page, or None when no more plants follow. Costs the page's
        length, not the store's size."""

    @abc.abstractmethod
    def __len__(self) -> int:
        """How many plants are stored."""

    def check(self) -> None:
        """Raise :class:`StoreUnavailable` when the store cannot serve requests."""

    def close(self) -> None:
        """Release files, locks and connections; the store is unusable afterwards."""

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
