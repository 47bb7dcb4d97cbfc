"""The store and its tokens, by an operator: ``plant-store check``, ``compact``, ``export``
and ``import`` (a store read or rewritten as a whole, with the server stopped where it must
be); ``plant-store db migrate``, ``check`` and ``rebase`` (the PostgreSQL store's schema,
on one connection of the command's own, through :mod:`plant_store.stores.postgres`, its
driver loaded only when used); ``plant-store token add``, ``list`` and ``revoke`` (the
bearer tokens in the token file, which running servers read again within a second)."""

import argparse
import os
import sys

from plant_store import config
from plant_store.cli import plants
from plant_store.cli.grammar import (
    DATABASE,
    STORE,
    TOKENS,
    Commands,
    command,
    drop_stdout,
    group,
    need_journal,
)
from plant_store.stores import JsonFileStore, Store, StoreError, jsonfile, needs_driver, open_store
from plant_store.stores.lock import StoreLocked
from plant_store.tokens import TokenFile
from plant_store.util.words import counted


def register(commands: Commands) -> None:
    command(commands, "check", "read the JSON-file store and report its state; changes "
                               "nothing, works beside a running server", ("data_dir",),
            ("store",), handler=check)
    command(commands, "compact", "rewrite the JSON-file store without its dead records "
                                 "(server stopped: a running one compacts by itself)",
            ("data_dir", "fsync"), ("store",), handler=compact)

    export = command(commands, "export", "write every plant as JSON Lines, one NewPlant a "
                                         "line, in creation order (a JSON-file store's server "
                                         "stopped)", STORE, ("token_file",),
                     handler=export_plants)  # token_file: never exported over
    export.add_argument("--output", metavar="FILE", default="-",
                        help="file to write, replaced only once whole [default: standard "
                             "output]")
    load = command(commands, "import", "create the plants of a JSON Lines file in its "
                                       "order, skipping those already there (a "
                                       "JSON-file store's server stopped); run it again "
                                       "to resume",
                   (*STORE, "fsync", "max_body_size"), handler=import_plants)
    load.add_argument("--input", metavar="FILE", default="-",
                      help="file to read [default: standard input]")


def check(args: argparse.Namespace, cfg: config.Config) -> int:
    need_journal(cfg, "check")
    state = jsonfile.Snapshot(cfg.data_dir)  # raises CorruptJournal, reported by main
    owed, dead = len(state.deliveries()), len(state.deliveries(dead=True))
    print(f"{state.path}: {counted(len(state), 'plant')} in {state.size} bytes; OK")
    print(f"{state.path}: {counted(state.records, 'record')}, "
          f"{counted(owed, 'webhook delivery', 'webhook deliveries')} owed, "
          f"{counted(dead, 'dead letter')}")
    if state.torn:
        print(f"{state.path}: a torn last record of {state.torn} bytes will be dropped "
              "at the next start")
    return 0


def compact(args: argparse.Namespace, cfg: config.Config) -> int:
    need_journal(cfg, "compact")
    try:
        store = JsonFileStore(cfg.data_dir, fsync=cfg.fsync, compact_share=0)
    except StoreLocked as exc:
        raise StoreError(f"{exc}; a running server compacts by itself") from None
    with store:
        before, after = store.compact()
    print(f"{store.path}: compacted from {before} to {after} bytes")
    return 0


def _need_lasting(cfg: config.Config, command: str) -> None:
    """A memory store opened here is this command's own: empty when it starts and gone when
    it ends. Exported, it would replace a backup with an empty file; imported into, it
    would keep nothing. Refused before any file is read, written or made."""
    if cfg.store == "memory":
        raise cfg.blame("store", f"'plant-store {command}' needs a store that outlives it: "
                                 "a memory store here is this command's own, empty, and "
                                 "gone when it ends (a server's cannot be reached)")


def export_plants(args: argparse.Namespace, cfg: config.Config) -> int:
    """Refused while a server holds the store (lock_timeout 0): one line, exit 2. It only
    reads: a PostgreSQL schema that lacks migrations is refused, not migrated."""
    path = args.output
    _need_lasting(cfg, "export")
    own = [os.path.join(cfg.data_dir, name) for name in jsonfile.OWN_FILES] + [cfg.token_file]
    if path != "-":
        plants.check_output(path, own)  # before the store is opened
    if cfg.store == "jsonfile":
        need_journal(cfg, "export")
    try:
        with open_store(cfg, lock_timeout=0, migrate=False) as store:
            if path != "-":
                with plants.output_file(path, own) as out:
                    count = plants.export(store, out)
            else:
                count = _export_to_stdout(store)
    except KeyboardInterrupt:  # Ctrl-C
        left = "standard output has a part of it" if path == "-" else f"{path} is unchanged"
        raise plants.TransferError(f"export interrupted; {left}") from None
    print(f"exported {count}", file=sys.stderr)
    return 0


def _export_to_stdout(store: Store) -> int:
    try:
        count = plants.export(store, sys.stdout.buffer)
        sys.stdout.buffer.flush()
    except OSError as exc:  # a closed pipe, say: no traceback, and none at exit
        drop_stdout()
        raise plants.TransferError(f"cannot write standard output: {exc.strerror}") from None
    return count


def import_plants(args: argparse.Namespace, cfg: config.Config) -> int:
    """Refused while a server holds the store (lock_timeout 0): one line, exit 2."""
    path = args.input
    _need_lasting(cfg, "import")
    name = "standard input" if path == "-" else path
    try:
        source = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise plants.TransferError(f"cannot read {name}: {exc.strerror}") from None
    try:
        with source, open_store(cfg, lock_timeout=0) as store:
            # Ctrl-C in it names the line
            result = plants.import_lines(store, source, cfg.max_body_size)
    except OSError as exc:  # the store raises StoreError: this is the input
        raise plants.TransferError(f"cannot read {name}: {exc.strerror}") from None
    except KeyboardInterrupt:  # Ctrl-C while the store opened
        raise plants.TransferError("import interrupted before its first line; nothing "
                                     "was imported") from None
    print(f"imported {result.created}, already there {result.replayed}", file=sys.stderr)
    return 0


def register_tokens(commands: Commands) -> None:
    token = group(commands, "token", "issue, list and revoke bearer tokens", "token_command")
    add = command(token, "add", "issue a token and print it, this once", TOKENS,
                  handler=add_token)
    add.add_argument("--label", required=True, help="a name for whoever holds the token")
    command(token, "list", "show each token's label and creation time, never the token",
            TOKENS, handler=list_tokens)
    revoke = command(token, "revoke", "revoke a token; servers refuse it within a second",
                     TOKENS, handler=revoke_token)
    revoke.add_argument("label", metavar="LABEL", help="the label given to 'token add'")


def add_token(args: argparse.Namespace, cfg: config.Config) -> int:
    print(TokenFile(cfg.token_file).add(args.label))
    return 0


def list_tokens(args: argparse.Namespace, cfg: config.Config) -> int:
    tokens = TokenFile(cfg.token_file)
    entries = tokens.entries()
    for entry in entries:
        print(f"{entry.label}\t{entry.created}")
    if not entries:
        print(f"no tokens in {tokens.path}", file=sys.stderr)
    return 0


def revoke_token(args: argparse.Namespace, cfg: config.Config) -> int:
    TokenFile(cfg.token_file).revoke(args.label)
    print(f"revoked {args.label!r}", file=sys.stderr)
    return 0


def register_db(commands: Commands) -> None:
    db = group(commands, "db", "the PostgreSQL store's schema", "db_command")
    command(db, "migrate", "apply pending schema migrations (a starting server does too)",
            DATABASE, handler=db_action)
    command(db, "check", "show the schema version and what is pending; exit status 1 when "
                         "something is", DATABASE, handler=db_action)
    command(db, "rebase", "move new plants' positions above every earlier one: run after "
                          "restoring a physical backup or disk snapshot as the primary",
            DATABASE, handler=db_action)


def db_action(args: argparse.Namespace, cfg: config.Config) -> int:
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
