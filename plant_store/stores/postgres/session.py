"""A connection made ready to serve: every new one gets the session settings (checked,
so the store refuses to start where they do not take), and the first one, made by the
store rather than the pool so that a start that fails says why, applies or checks the
migrations."""

import logging
from typing import Any

import psycopg

from plant_store.stores.base import StoreError
from plant_store.stores.postgres import notices, schema
from plant_store.stores.postgres.connection import connect, reason
from plant_store.stores.postgres.queries import QUERIES

log = logging.getLogger("plant_store.stores.postgres.store")  # the name users filter on


class Session:
    """The settings of each new connection. ``pooled``: without prepared statements the
    store expects a pooler in transaction mode, where a session's SET stays on whichever
    server connection ran it: the bound must be every session's own (the role's or the
    database's)."""

    def __init__(self, where: str, *, statement_timeout: float, pooled: bool) -> None:
        self._where = where
        self._statement_ms = round(statement_timeout * 1000)
        self._pooled = pooled

    def configure(self, conn: psycopg.Connection) -> psycopg.Connection:
        """Every new connection: its notices watched, statement_timeout applied and
        checked (StoreError naming it when it did not take)."""
        notices.watch(conn)
        wanted = self._statement_ms
        # SHOW-like queries answer one row: fetchone() is never None here (twice below).
        current, default = conn.execute(QUERIES["statement_timeout"]).fetchone()  # type: ignore[misc]
        if self._pooled and (default == 0 or default > wanted):
            raise StoreError(
                f"{self._where}: with database_prepared_statements = false (a pooler in "
                f"transaction mode) statement_timeout must be the role's own, at most "
                f"{wanted} ms (it is {f'{default} ms' if default else 'unbounded'}): "
                f"ALTER ROLE ... SET statement_timeout = '{wanted}ms'")
        if current == 0 or current > wanted:  # a role's or database's own bound may do
            conn.execute(QUERIES["set_statement_timeout"], {"ms": str(wanted)})
            current = conn.execute(QUERIES["statement_timeout"]).fetchone()[0]  # type: ignore[index]
            if current != wanted:
                raise StoreError(
                    f"{self._where}: setting statement_timeout={wanted} ms did not take (it "
                    f"is {current} ms); behind a pooler in transaction mode, set it for the "
                    f"role instead: ALTER ROLE ... SET statement_timeout = '{wanted}ms'")
        return conn

    def first(self, url: str, timeout: float, kwargs: dict[str, Any], *,
              migrate: bool) -> None:
        """The first connection: configured, and the schema migrated (``migrate``) or
        checked complete; StoreError saying why the store cannot use the database."""
        with connect(url, timeout, **kwargs) as conn:
            self.configure(conn)
            try:
                if migrate:
                    for name in schema.migrate(conn):
                        log.info("%s: applied migration %s", self._where, name)
                else:
                    missing = schema.pending(conn)
                    if missing:
                        raise StoreError(f"{self._where} lacks migrations "
                                         f"{', '.join(missing)}; run 'plant-store db migrate'")
                too_new = schema.too_new(conn)
                if too_new:
                    raise StoreError(f"cannot use {self._where}: {too_new}")
            except psycopg.Error as exc:
                raise StoreError(f"cannot use {self._where}: {reason(exc)}") from None
