"""Connections to the database: reaching it and saying which one without ever showing its
password, each connection's options and session settings, the server's warnings on a write,
the watchdog's steps on a connection past its deadline, and the operator's commands
(``plant-store db``), each on one connection of its own."""

import contextlib
import logging
import os
import socket
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.errors import Diagnostic

from plant_store.stores.base import StoreError
from plant_store.stores.postgres import schema
from plant_store.stores.postgres.schema import QUERIES
from plant_store.util.concurrency import Watchdog, Watched

log = logging.getLogger("plant_store.stores.postgres.store")  # the name users filter on


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
# acknowledges TCP, so only the store's deadline (:func:`watched`) bounds that.
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


# The server's warnings on a write: the one sign that a commit was not confirmed.
#
# A commit waiting for a synchronous standby that is cancelled (an operator's
# ``pg_cancel_backend``, a tool, this store's own deadline) still commits locally, and the
# server reports success with only a WARNING ("canceling wait for synchronous replication
# ... already committed locally, but might not have been replicated"). The wording is
# localized (lc_messages) and the SQLSTATE is the generic 01000, so any WARNING on a write
# counts: the store's own statements raise none, and an unexplained one is a reason to
# retry (a replay, durable once it answers), never to acknowledge.


def watch(conn: psycopg.Connection) -> None:
    """Collect the connection's notices in ``conn.notices`` as (severity, message) pairs:
    a Diagnostic is empty once its handler returns. The store clears the list before each
    statement."""
    seen: list[tuple[str | None, str | None]] = []

    def note(diag: Diagnostic) -> None:
        seen.append((diag.severity_nonlocalized, diag.message_primary))

    conn.notices = seen  # type: ignore[attr-defined]
    conn.add_notice_handler(note)


def noted(conn: psycopg.Connection) -> list[tuple[str | None, str | None]]:
    """The list ``watch`` keeps on ``conn``: an attribute of its own, which psycopg's
    types do not know."""
    return conn.notices  # type: ignore[attr-defined, no-any-return]


def unconfirmed(notices: list[tuple[str | None, str | None]]) -> bool:
    return any(severity == "WARNING" for severity, _ in notices)


# A connection made ready to serve: every new one gets the session settings (checked, so
# the store refuses to start where they do not take), and the first one, made by the store
# rather than the pool so that a start that fails says why, applies or checks the
# migrations.


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
        watch(conn)
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


# Deadlines on database work, enforced from the client side. ``statement_timeout`` is the
# server's bound, and it does not hold where it matters most: a commit waiting for a
# synchronous standby that has gone, a frozen server, a network that drops packets, a
# pooler that lost the setting. So each operation holds its connection under the store's
# watchdog (:class:`~plant_store.util.concurrency.Watchdog`, whose docstring has the
# invariants): past the deadline a cancel request (the backend stops waiting: a statement
# is rolled back, a commit's wait for the standby ends with a warning), and if the
# operation still has not returned a second later (the server does not answer at all),
# the socket shut down, so the thread blocked on it gets an error at once. A connection
# the watchdog acted on is closed, never returned to the pool: a cancel request that
# arrives late can never hit the next statement sent on it.

GRACE = 1.0  # seconds between the cancel request and shutting the socket down
CANCEL_TIMEOUT = 0.5  # seconds the watchdog gives a cancel request to be delivered


def deadlines() -> Watchdog:
    """The store's watchdog: its steps on a connection GRACE apart."""
    return Watchdog("plant-store-deadlines", grace=GRACE)


def watched(watchdog: Watchdog, conn: psycopg.Connection, deadline: float) -> Watched:
    """``conn`` under ``watchdog`` until ``deadline``: then a cancel request, and the
    socket shut down GRACE later. When ``watchdog.exit`` says it acted, the caller closes
    the connection instead of reusing it."""
    return watchdog.enter(deadline, lambda: conn.cancel_safe(timeout=CANCEL_TIMEOUT),
                          lambda: _shut_down(conn))


def _shut_down(conn: psycopg.Connection) -> None:
    """Make every read and write on the connection's socket fail now, whoever is blocked
    on it; the file descriptor stays the connection's, to be closed by its owner."""
    with contextlib.suppress(Exception), socket.socket(fileno=os.dup(conn.fileno())) as sock:
        sock.shutdown(socket.SHUT_RDWR)  # closing the duplicate leaves the original open


# The PostgreSQL store's schema, for ``plant-store db``: migrate it, say where it stands,
# rebase positions. Each on one connection of its own, psycopg's errors said in one line
# (:class:`StoreError`): the command line calls these, never a query of its own.


def migrate(url: str, timeout: float) -> list[str]:
    """Apply what is pending; the names applied."""
    with connect(url, timeout) as conn, _said(url, "migrate"):
        return schema.migrate(conn)


def state(url: str, timeout: float) -> tuple[int, list[str]]:
    """The newest migration applied (0: none), and the names of those pending; changes
    nothing."""
    with connect(url, timeout) as conn, _said(url, "check"):
        return max(schema.applied(conn), default=0), schema.pending(conn)


def rebase(url: str, timeout: float) -> None:
    """Move the positions new plants get above every earlier one, whatever the clock says
    (after a physical backup or snapshot was started as the primary); migrates first."""
    with connect(url, timeout) as conn, _said(url, "rebase"):
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
            raise StoreError(f"cannot {self._action} {describe(self._url)}: "
                             f"{reason(exc)}") from None
