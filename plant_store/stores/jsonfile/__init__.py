"""The durable default: the store's semantics (:mod:`~plant_store.stores.jsonfile.store`), the
append-only file with group commit under it (:mod:`~plant_store.stores.jsonfile.appendlog`)
and the record format (:mod:`~plant_store.stores.jsonfile.journal`)."""

from plant_store.stores.jsonfile.snapshot import Snapshot
from plant_store.stores.jsonfile.store import DATA_FILE, JsonFileStore

__all__ = ["DATA_FILE", "JsonFileStore", "Snapshot"]
