"""Plants in PostgreSQL, through psycopg 3 and its connection pool.

Every change is one statement in autocommit mode: one round trip, one transaction, and no
transaction held open across anything slow (the webhook worker claims a delivery with a
lease, sends it, then records the outcome, each a statement of its own). Any failure to
reach or use the database is :class:`StoreUnavailable` (503), and the pool replaces broken
connections by itself, so the service recovers when the database comes back.
"""

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from plant_store.stores.base import Plant, Store, StoreError, StoreUnavailable, replay
from plant_store.stores.outbox import Delivery, deliveries_for
from plant_store.stores.postgres import schema
from plant_store.stores.postgres.connection import check_url, connect, describe, reason
from plant_store.stores.postgres.queries import QUERIES

log = logging.getLogger(__name__)

RETRIES = 5  # runs of a statement that met a race or a serialization failure
WRITES = frozenset({"create", "delete", "claim", "delivered", "failed", "retry"})


class PostgresStore(Store):
    def __init__(self, url: str, *, pool_size: int = 10, pool_timeout: float = 5.0,
                 statement_timeout: float = 5.0, migrate: bool = True) -> None:
        check_url(url)
        self.where = describe(url)
        self._pool_size = pool_size
        self._timeout = pool_timeout
        self._pool = ConnectionPool(
            url, min_size=1, max_size=pool_size, timeout=pool_timeout, open=False,
            name="plant-store", kwargs={
                "autocommit": True,
                "options": f"-c statement_timeout={round(statement_timeout * 1000)}",
                "connect_timeout": max(1, round(pool_timeout)),
            })
        try:
            self._pool.open(wait=True, timeout=pool_timeout)
            with self._pool.connection() as conn:
                if migrate:
                    for name in schema.migrate(conn):
                        log.info("%s: applied migration %s", self.where, name)
                else:
                    missing = schema.pending(conn)
                    if missing:
                        raise StoreError(f"{self.where} lacks migrations {', '.join(missing)}; "
                                         "run 'plant-store db migrate'")
        except PoolTimeout:
            self._pool.close()
            connect(url, pool_timeout).close()  # raises StoreError with the real reason
            raise StoreError(f"cannot use {self.where}: no connection within "
                             f"{pool_timeout:g} s") from None
        except psycopg.Error as exc:
            self._pool.close()
            raise StoreError(f"cannot use {self.where}: {reason(exc)}") from None
        except BaseException:
            self._pool.close()
            raise

    def _run(self, name: str, params: dict[str, Any],
             result: Callable[[psycopg.Cursor], Any]) -> Any:
        """Run a named query and return ``result(cursor)``; retry serialization failures and
        deadlocks (harmless on PostgreSQL, routine on engines that speak its protocol)."""
        for attempt in range(RETRIES):
            try:
                with self._pool.connection() as conn:
                    if name not in WRITES:
                        return result(conn.execute(QUERIES[name], params))
                    started = time.perf_counter()  # the round trip, not the pool's wait
                    answer = result(conn.execute(QUERIES[name], params))
                    self.observer.wrote(time.perf_counter() - started)
                    return answer
            except (pg_errors.SerializationFailure, pg_errors.DeadlockDetected):
                if attempt == RETRIES - 1:
                    raise StoreUnavailable(f"{self.where}: too many conflicts",
                                           "contention") from None
            except PoolTimeout:
                raise StoreUnavailable(
                    f"{self.where} is not reachable, or all {self._pool_size} connections "
                    f"are busy: none free within {self._timeout:g} s", "unreachable") from None
            except psycopg.OperationalError as exc:
                raise StoreUnavailable(f"{self.where} is not reachable: {reason(exc)}",
                                       "unreachable") from None
            except (pg_errors.ReadOnlySqlTransaction, pg_errors.InsufficientPrivilege,
                    psycopg.InternalError) as exc:  # a standby, a read-only or locked-down one
                raise StoreUnavailable(f"{self.where} refuses writes: {reason(exc)}",
                                       "read_only") from None
        raise AssertionError("unreachable")

    def create(self, plant: Plant, webhooks: Sequence[str] = ()) -> tuple[Plant, bool]:
        owed = deliveries_for(plant, tuple(webhooks)) if webhooks else []
        params = {"id": plant.id, "name": plant.name.encode(), "tag": _utf8(plant.tag),
                  "delivery_ids": [d.id for d in owed], "urls": [d.url for d in owed],
                  "body": owed[0].body if owed else b""}
        for _ in range(RETRIES):
            row = self._run("create", params, lambda cur: cur.fetchone())
            if row is not None:
                created, name, tag = row
                if created:
                    return plant, True
                return replay(_plant(plant.id, name, tag), plant), False
            # A create of this id committed after our snapshot: run again with a new one.
        raise StoreUnavailable(f"{self.where}: plant {plant.id} is changing too fast",
                               "contention")

    def delete(self, plant_id: int) -> bool:
        return self._run("delete", {"id": plant_id}, lambda cur: cur.rowcount == 1)

    def get(self, plant_id: int) -> Plant | None:
        row = self._run("get", {"id": plant_id}, lambda cur: cur.fetchone())
        return None if row is None else _plant(plant_id, *row)

    def page(self, start: int, limit: int) -> tuple[list[Plant], int | None]:
        rows = self._run("page", {"start": start, "limit": limit + 1},
                         lambda cur: cur.fetchall())
        plants = [_plant(plant_id, name, tag) for plant_id, name, tag, _ in rows[:limit]]
        return plants, rows[limit][3] if len(rows) > limit else None

    def __len__(self) -> int:
        return self._run("count", {}, lambda cur: cur.fetchone()[0])

    def deliveries(self, *, dead: bool = False) -> list[Delivery]:
        rows = self._run("dead" if dead else "due", {}, lambda cur: cur.fetchall())
        return [Delivery(i, plant_id, url, bytes(body), attempts, error, is_dead)
                for i, plant_id, url, body, attempts, error, is_dead in rows]

    def outbox_counts(self) -> tuple[int, int]:
        return self._run("outbox_counts", {}, lambda cur: tuple(cur.fetchone()))

    def claim(self, delivery_id: str, lease: float) -> bool:
        return self._run("claim", {"id": delivery_id, "lease": lease},
                         lambda cur: cur.rowcount == 1)

    def settle(self, delivery_id: str, state: str, error: str | None = None,
               retry_in: float = 0.0) -> None:
        if state == "delivered":
            name, params = "delivered", {"id": delivery_id}
        elif state == "retry":
            name, params = "retry", {"id": delivery_id}
        else:
            name, params = "failed", {"id": delivery_id, "error": error,
                                      "dead": state == "dead", "retry_in": retry_in}
        if not self._run(name, params, lambda cur: cur.rowcount == 1):
            raise KeyError(delivery_id)

    def check(self) -> None:
        if self._run("probe", {}, lambda cur: cur.fetchone()[0]):
            raise StoreUnavailable(f"{self.where} is read-only (a standby, or "
                                   "default_transaction_read_only): creates would fail",
                                   "read_only")

    def close(self) -> None:
        self._pool.close()


def _utf8(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _plant(plant_id: int, name: bytes, tag: bytes | None) -> Plant:
    return Plant(plant_id, bytes(name).decode(), None if tag is None else bytes(tag).decode())
