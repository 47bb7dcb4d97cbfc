"""The durable default: the store's semantics (:mod:`~plant_store.stores.jsonfile.store`), the
append-only file with group commit under it (:mod:`~plant_store.stores.jsonfile.appendlog`)
and the record format (:mod:`~plant_store.stores.jsonfile.journal`)."""

from plant_store.stores.jsonfile.snapshot import Snapshot
from plant_store.stores.jsonfile.store import COMPACT_FILE, DATA_FILE, LOCK_FILE, JsonFileStore

OWN_FILES = (DATA_FILE, COMPACT_FILE, LOCK_FILE)  # what the store keeps in its data directory

__all__ = ["DATA_FILE", "OWN_FILES", "JsonFileStore", "Snapshot"]
