"""``plant-store db migrate``, ``check`` and ``rebase``: the PostgreSQL store's schema, on
one connection of the command's own (psycopg imported only here, when used)."""

import argparse

from plant_store import config
from plant_store.cli.grammar import DATABASE, Commands, command, group
from plant_store.stores import StoreError, needs_driver


def register(commands: Commands) -> None:
    db = group(commands, "db", "the PostgreSQL store's schema", "db_command")
    command(db, "migrate", "apply pending schema migrations (a starting server does too)",
            DATABASE, handler=run)
    command(db, "check", "show the schema version and what is pending; exit status 1 when "
                         "something is", DATABASE, handler=run)
    command(db, "rebase", "move new plants' positions above every earlier one: run after "
                          "restoring a physical backup or disk snapshot as the primary",
            DATABASE, handler=run)


def run(args: argparse.Namespace, cfg: config.Config) -> int:
    """The three actions share the connection and what a driver error says; psycopg is
    imported here, so a lean install without it says which extra it lacks."""
    with needs_driver():  # only when used
        import psycopg

        from plant_store.stores.postgres import connection, schema
        from plant_store.stores.postgres.queries import QUERIES

    if not cfg.database_url:
        raise StoreError("set database_url (or --database-url) to the PostgreSQL database")
    with connection.connect(cfg.database_url, cfg.database_timeout) as conn:
        try:
            if args.db_command == "migrate":
                applied = schema.migrate(conn)
                print("applied " + ", ".join(applied) if applied else "nothing to apply")
                return 0
            if args.db_command == "rebase":
                schema.migrate(conn)
                conn.execute(QUERIES["rebase"], {"force": True})
                print("positions continue above every earlier one, 2^32 transactions beyond")
                return 0
            done, missing = schema.applied(conn), schema.pending(conn)
        except psycopg.Error as exc:  # a table of ours taken by another schema
            raise StoreError(f"cannot {args.db_command} "
                             f"{connection.describe(cfg.database_url)}: "
                             f"{connection.reason(exc)}") from None
    print(f"schema version {max(done, default=0)}; "
          + (f"pending: {', '.join(missing)}" if missing else "nothing pending"))
    return 1 if missing else 0
