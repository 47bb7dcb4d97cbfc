"""Store implementations behind one interface, chosen by the ``store`` setting."""

from plant_store.config import Config
from plant_store.stores.base import (
    Conflict,
    Plant,
    Store,
    StoreError,
    StoreUnavailable,
)
from plant_store.stores.jsonfile import JsonFileStore
from plant_store.stores.memory import MemoryStore

__all__ = [
    "Conflict",
    "JsonFileStore",
    "MemoryStore",
    "Plant",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "open_store",
]


def open_store(config: Config, *, lock_timeout: float | None = None) -> Store:
    """The configured store, holding ``data_dir``'s lock; waits for its owner to let go up
    to ``lock_timeout`` seconds (``config.lock_timeout`` when None)."""
    if lock_timeout is None:
        lock_timeout = config.lock_timeout
    if config.store == "memory":
        return MemoryStore(config.data_dir, lock_timeout=lock_timeout)
    return JsonFileStore(config.data_dir, fsync=config.fsync,
                         compact_share=config.compact_dead_share, lock_timeout=lock_timeout)
