"""``plant-store db migrate``, ``check`` and ``rebase``: the PostgreSQL store's schema, on
one connection of the command's own, through the store package's own functions
(:mod:`plant_store.stores.postgres`; its driver loaded only when used)."""

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
    """The three actions; the driver loaded only here, when used: a lean install without
    it says which extra it lacks."""
    with needs_driver():  # only when used
        from plant_store.stores import postgres

    if not cfg.database_url:
        raise StoreError("set database_url (or --database-url) to the PostgreSQL database")
    url, timeout = cfg.database_url, cfg.database_timeout
    if args.db_command == "migrate":
        applied = postgres.migrate(url, timeout)
        print("applied " + ", ".join(applied) if applied else "nothing to apply")
        return 0
    if args.db_command == "rebase":
        postgres.rebase(url, timeout)
        print("positions continue above every earlier one, 2^32 transactions beyond")
        return 0
    version, missing = postgres.state(url, timeout)
    print(f"schema version {version}; "
          + (f"pending: {', '.join(missing)}" if missing else "nothing pending"))
    return 1 if missing else 0
