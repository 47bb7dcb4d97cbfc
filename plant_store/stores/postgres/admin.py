"""The PostgreSQL store's schema, for ``plant-store db``: migrate it, say where it stands,
rebase positions. Each on one connection of its own, psycopg's errors said in one line
(:class:`StoreError`): the command line calls these, never a query of its own."""

import psycopg

from plant_store.stores.base import StoreError
from plant_store.stores.postgres import connection, schema
from plant_store.stores.postgres.queries import QUERIES


def migrate(url: str, timeout: float) -> list[str]:
    """Apply what is pending; the names applied."""
    with connection.connect(url, timeout) as conn, _said(url, "migrate"):
        return schema.migrate(conn)


def state(url: str, timeout: float) -> tuple[int, list[str]]:
    """The newest migration applied (0: none), and the names of those pending; changes
    nothing."""
    with connection.connect(url, timeout) as conn, _said(url, "check"):
        return max(schema.applied(conn), default=0), schema.pending(conn)


def rebase(url: str, timeout: float) -> None:
    """Move the positions new plants get above every earlier one, whatever the clock says
    (after a physical backup or snapshot was started as the primary); migrates first."""
    with connection.connect(url, timeout) as conn, _said(url, "rebase"):
        schema.migrate(conn)
        conn.execute(QUERIES["rebase"], {"force": True})


class _said:
    """psycopg's error, in one line naming the action and the database."""

    def __init__(self, url: str, action: str) -> None:
        self._url, self._action = url, action

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: object) -> None:
        if isinstance(exc, psycopg.Error):  # a table of ours taken by another schema
            raise StoreError(f"cannot {self._action} {connection.describe(self._url)}: "
                             f"{connection.reason(exc)}") from None
