"""Reaching the database, and saying which one without ever showing its password."""

from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

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
    """The database a URL names, without its password, for messages and logs: on the Unix
    socket in a directory, or on host:port (each host of a list, "or" between them)."""
    params = conninfo_to_dict(url)
    host, port = str(params.get("host") or ""), str(params.get("port") or "")
    if not host or not port:
        default_host, default_port = _defaults(params)
        host, port = host or default_host, port or default_port
    hosts = host.split(",")
    ports = port.split(",") if "," in port else [port] * len(hosts)
    where = " or ".join(_where(h, p) for h, p in zip(hosts, ports, strict=False))
    return f"database {params.get('dbname', '(default)')!r} on {where}"


def _where(host: str, port: str) -> str:
    if not host or host.startswith(("/", "@")):
        return f"the Unix socket in {host}" if host else "the default Unix socket"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _defaults(params: dict[str, Any]) -> tuple[str, str]:
    """The host and port libpq takes where ``params`` name none (PGHOST and PGPORT, a
    service file, else the socket directory it was built with: Debian's is
    /var/run/postgresql), found without connecting: an invalid sslmode stops libpq once it
    has settled them, before it connects."""
    attempt = psycopg.pq.PGconn.connect_start(
        make_conninfo("", **{**params, "sslmode": "none-so-never-connect"}).encode())
    try:
        return (attempt.host or b"").decode(), (attempt.port or b"5432").decode()
    except psycopg.Error:
        return "", "5432"
    finally:
        attempt.finish()


def reason(exc: BaseException | str) -> str:
    """The first line of a driver error (or of its text): enough to act on, never the
    connection string."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


# Defaults for what the URL leaves unset: a peer that stops answering (a network partition,
# a host gone) is noticed within seconds, not the kernel's two hours. A frozen server still
# acknowledges TCP, so only the store's deadline (deadline.py) bounds that.
TCP_DEFAULTS = {
    "connect_timeout": "2",  # per host of a multi-host URL; libpq's least
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "1",
    "keepalives_count": "3",
    "tcp_user_timeout": "5000",  # milliseconds data may go unacknowledged
}


def options(url: str, *, prepared_statements: bool) -> dict[str, Any]:
    """psycopg's connection keywords for ``url``: autocommit (every statement its own
    transaction), the TCP defaults the URL does not override, and no server-side prepared
    statements when a pooler in transaction mode could run them on another session."""
    given = conninfo_to_dict(url)
    kwargs: dict[str, Any] = {
        name: value for name, value in TCP_DEFAULTS.items() if name not in given}
    kwargs["autocommit"] = True
    if not prepared_statements:
        kwargs["prepare_threshold"] = None
    return kwargs


def connect(url: str, timeout: float, **kwargs: Any) -> psycopg.Connection:
    """One connection, for the operator's commands and the store's first look at the
    database; StoreError naming the real cause when it cannot be had."""
    check_url(url)
    kwargs.setdefault("autocommit", True)
    kwargs.setdefault("connect_timeout", max(2, round(timeout)))
    try:
        return psycopg.connect(url, **kwargs)
    except psycopg.Error as exc:
        raise StoreError(f"cannot use {describe(url)}: {reason(exc)}") from None
