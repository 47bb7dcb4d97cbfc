"""The PostgreSQL store: many processes and instances share one data set. Its parts by
concern: the store's semantics (``store``), attempts and readiness (``attempts``), the row
codec and the writes of many plants (``writes``), connections and the operator's commands
(``connection``), the SQL (``schema``), and every reach into psycopg_pool
(``pool_adapter``)."""

from plant_store.stores.postgres.connection import migrate, rebase, state
from plant_store.stores.postgres.store import PostgresStore

__all__ = ["PostgresStore", "migrate", "rebase", "state"]
