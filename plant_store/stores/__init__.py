"""Store implementations behind one interface, chosen by the ``store`` setting."""

from plant_store.config import Config
from plant_store.stores.base import (
    Conflict,
    DataDirError,
    Plant,
    Store,
    StoreError,
    StoreUnavailable,
)
from plant_store.stores.jsonfile import JsonFileStore
from plant_store.stores.memory import MemoryStore

__all__ = [
    "Conflict",
    "DataDirError",
    "JsonFileStore",
    "MemoryStore",
    "Plant",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "open_store",
]


def open_store(config: Config, *, lock_timeout: float | None = None) -> Store:
    """The configured store. The memory and JSON-file stores hold ``data_dir``'s lock,
    waiting for its owner to let go up to ``lock_timeout`` seconds (``config.lock_timeout``
    when None); the PostgreSQL store is shared, and applies pending migrations."""
    if config.store == "postgresql":
        from plant_store.stores.postgres import PostgresStore  # psycopg only when used

        return PostgresStore(config.database_url, pool_size=config.database_pool_size,
                             timeout=config.database_timeout,
                             statement_timeout=config.statement_timeout,
                             prepared_statements=config.database_prepared_statements)
    if lock_timeout is None:
        lock_timeout = config.lock_timeout
    if config.store == "memory":
        return MemoryStore(config.data_dir, lock_timeout=lock_timeout)
    return JsonFileStore(config.data_dir, fsync=config.fsync,
                         compact_share=config.compact_dead_share, lock_timeout=lock_timeout)
