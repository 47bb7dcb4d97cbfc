"""Reaching the database, and saying which one without ever showing its password."""

import psycopg
from psycopg.conninfo import conninfo_to_dict

from plant_store.stores.base import StoreError


def check_url(url: str) -> None:
    """StoreError if ``url`` is not a libpq URL or DSN. The parser's message quotes the
    whole string, password and all, so it is never shown; nor is the string handed to
    anything that would log it (the pool logs its failed connections)."""
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise StoreError("database_url is not a libpq URL (postgresql://user@host/db) or "
                         "key=value string; it is not shown, as it may hold a password"
                         ) from None


def describe(url: str) -> str:
    """The database a URL names, without its password, for messages and logs."""
    params = conninfo_to_dict(url)
    return f"database {params.get('dbname', '(default)')!r} on {params.get('host', 'localhost')}"


def reason(exc: BaseException) -> str:
    """The first line of a driver error: enough to act on, never the connection string."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def connect(url: str, timeout: float) -> psycopg.Connection:
    """One connection, for the operator's commands; StoreError when it cannot be had."""
    check_url(url)
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=max(1, round(timeout)))
    except psycopg.Error as exc:
        raise StoreError(f"cannot use {describe(url)}: {reason(exc)}") from None
