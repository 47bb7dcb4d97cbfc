"""The PostgreSQL store: many processes and instances share one data set."""

from plant_store.stores.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
