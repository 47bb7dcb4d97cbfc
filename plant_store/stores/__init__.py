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


def open_store(config: Config) -> Store:
    if config.store == "memory":
        return MemoryStore()
    return JsonFileStore(config.data_dir, fsync=config.fsync,
                         compact_share=config.compact_dead_share)
