"""Store implementations behind one interface, chosen by the ``store`` setting."""

import contextlib
from collections.abc import Iterator
from typing import Protocol

from plant_store.events import Events
from plant_store.stores.base import (
    BatchConflict,
    Conflict,
    DataDirError,
    PreconditionFailed,
    Store,
    StoreError,
    StoreUnavailable,
)
from plant_store.stores.jsonfile.store import JsonFileStore
from plant_store.stores.memory import MemoryStore

__all__ = [
    "BatchConflict",
    "Conflict",
    "DataDirError",
    "JsonFileStore",
    "MemoryStore",
    "PreconditionFailed",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "one_process_problem",
    "open_store",
]

ONE_PROCESS = {  # a store that serves one process: what more worker processes would do
    "jsonfile": "the JSON-file store serves one process: the other workers would answer 503",
    "memory": "the memory store keeps its plants in its process: each worker would have "
              "plants of its own",
}


def one_process_problem(store: str, workers: int, server: str, one: str) -> str | None:
    """What is wrong with ``workers`` processes of ``server`` on ``store``, if anything;
    ``one``: the server's options for one process."""
    if workers <= 1 or store not in ONE_PROCESS:
        return None
    return (f"store={store} with {workers} {server} worker processes: {ONE_PROCESS[store]}; "
            f"use {one} with --threads, or store = postgresql")


@contextlib.contextmanager
def needs_driver() -> Iterator[None]:
    """Imports of the PostgreSQL driver, which is an extra: its absence in one line."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("psycopg", "psycopg_pool"):
            raise
        raise StoreError("store = postgresql needs the PostgreSQL driver, an extra: "
                         "pip install 'plant-store[postgresql]'") from None


class StoreSettings(Protocol):
    """What :func:`open_store` reads of the settings (``plant_store.config.Config`` has it):
    declared here, so that the store layer needs nothing from the layers above it."""

    store: str
    data_dir: str
    fsync: bool
    compact_dead_share: float
    lock_timeout: float
    database_url: str
    database_pool_size: int
    database_timeout: float
    statement_timeout: float
    database_prepared_statements: bool


def open_store(config: StoreSettings, *, lock_timeout: float | None = None,
               migrate: bool = True, events: Events | None = None) -> Store:
    """The configured store. The memory and JSON-file stores hold ``data_dir``'s lock,
    waiting for its owner to let go up to ``lock_timeout`` seconds (``config.lock_timeout``
    when None); the PostgreSQL store is shared, and applies pending migrations (with
    ``migrate`` False it refuses a schema that lacks some: a command that only reads)."""
    if config.store == "postgresql":
        with needs_driver():
            from plant_store.stores.postgres import PostgresStore  # psycopg only when used

        return PostgresStore(config.database_url, pool_size=config.database_pool_size,
                             timeout=config.database_timeout,
                             statement_timeout=config.statement_timeout,
                             prepared_statements=config.database_prepared_statements,
                             migrate=migrate, events=events)
    if lock_timeout is None:
        lock_timeout = config.lock_timeout
    if config.store == "memory":
        return MemoryStore(config.data_dir, lock_timeout=lock_timeout)
    return JsonFileStore(config.data_dir, fsync=config.fsync,
                         compact_share=config.compact_dead_share, lock_timeout=lock_timeout,
                         events=events)
