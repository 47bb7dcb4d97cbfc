"""The server's warnings on a write: the one sign that a commit was not confirmed.

A commit waiting for a synchronous standby that is cancelled (an operator's
``pg_cancel_backend``, a tool, this store's own deadline) still commits locally, and the
server reports success with only a WARNING ("canceling wait for synchronous replication
... already committed locally, but might not have been replicated"). The wording is
localized (lc_messages) and the SQLSTATE is the generic 01000, so any WARNING on a write
counts: the store's own statements raise none, and an unexplained one is a reason to
retry (a replay, durable once it answers), never to acknowledge.
"""

import psycopg
from psycopg.errors import Diagnostic


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
