"""The ``plant-store`` command: serve, check and compact the store, export and import its
plants, tokens, webhooks.

Every failure an operator can cause (bad setting, unwritable data directory, locked store,
unknown token label) ends with one line on stderr and exit status 2, not a traceback.
"""

import argparse
import os
import sys

from plant_store import __version__, config, logs, server, transfer, webhooks
from plant_store.stores import JsonFileStore, Store, StoreError, jsonfile, open_store
from plant_store.stores.lock import StoreLocked
from plant_store.tokens import TokenError, TokenFile
from plant_store.words import counted

FIRST_TOKEN_LABEL = "initial"


def _parser() -> argparse.ArgumentParser:
    settings = argparse.ArgumentParser(add_help=False)
    group = settings.add_argument_group("settings (override the config file and environment)")
    group.add_argument("--config", metavar="FILE",
                       help="INI file with a [plant-store] section (see conf/plant-store.ini)")
    for setting in config.SETTINGS:
        group.add_argument(setting.flag, dest=setting.name, metavar="VALUE",
                           help=f"{setting.help} Default: {setting.default!r}.")

    parser = argparse.ArgumentParser(prog="plant-store", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("serve", parents=[settings], help="run the HTTP service")
    commands.add_parser("check", parents=[settings],
                        help="read the JSON-file store and report its state; changes nothing")
    commands.add_parser("compact", parents=[settings],
                        help="rewrite the JSON-file store without its dead records (server "
                             "stopped; a running server compacts by itself)")
    db = commands.add_parser("db", help="the PostgreSQL store's schema (store = postgresql)")
    db_commands = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    db_commands.add_parser("migrate", parents=[settings],
                           help="apply pending schema migrations (a starting server does too)")
    db_commands.add_parser("check", parents=[settings],
                           help="show the schema version and what is pending; changes nothing "
                                "(exit status 1 when something is pending)")
    export = commands.add_parser(
        "export", parents=[settings],
        help="write every plant as JSON Lines, one NewPlant a line, in creation order")
    export.add_argument("--output", metavar="FILE", default="-",
                        help="file to write, replaced only once whole; default: standard output")
    load = commands.add_parser(
        "import", parents=[settings],
        help="create the plants of a JSON Lines file (as export writes it) in its order; "
             "plants already there are skipped, so running it again resumes it")
    load.add_argument("--input", metavar="FILE", default="-",
                      help="file to read; default: standard input")
    hooks = commands.add_parser("webhooks",
                                help="see the outbox, resend dead letters, make a secret")
    hook_commands = hooks.add_subparsers(dest="webhooks_command", required=True,
                                         metavar="ACTION")
    hook_commands.add_parser("list", parents=[settings],
                             help="deliveries still owed and dead letters; changes nothing")
    resend = hook_commands.add_parser(
        "retry", parents=[settings],
        help="put dead letters back in the outbox (all, or the ids given) to be sent again")
    resend.add_argument("ids", nargs="*", metavar="ID", help="delivery ids; none means all")
    hook_commands.add_parser("secret", help="print a new whsec_ secret for webhook_secret")
    token = commands.add_parser("token", help="issue, list and revoke bearer tokens")
    token_commands = token.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    add = token_commands.add_parser("add", parents=[settings], help="issue a token, print it once")
    add.add_argument("--label", required=True, help="a name for whoever holds the token")
    token_commands.add_parser("list", parents=[settings], help="show labels and dates")
    revoke = token_commands.add_parser("revoke", parents=[settings], help="revoke a token")
    revoke.add_argument("label")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "webhooks" and args.webhooks_command == "secret":
        print(webhooks.new_secret())  # no settings read: the one set may be what it replaces
        return 0
    flags = {s.name: getattr(args, s.name) for s in config.SETTINGS}
    try:
        cfg = config.load(args.config or os.environ.get("PLANT_STORE_CONFIG"), os.environ, flags)
        logs.configure(cfg.log_level, cfg.log_format)
        tokens = TokenFile(cfg.token_file)
        if args.command == "serve":
            return _serve(cfg, tokens)
        if args.command == "check":
            return _check(cfg)
        if args.command == "compact":
            return _compact(cfg)
        if args.command == "db":
            return _db(args, cfg)
        if args.command == "export":
            return _export(cfg, args.output)
        if args.command == "import":
            return _import(cfg, args.input)
        if args.command == "webhooks":
            return _webhooks(args, cfg)
        return _token(args, tokens)
    except (config.ConfigError, StoreError, TokenError, transfer.TransferError) as exc:
        print(f"plant-store: error: {exc}", file=sys.stderr)
        return 2


def _serve(cfg: config.Config, tokens: TokenFile) -> int:
    store = open_store(cfg)

    def announce(url: str) -> None:
        """Once listening, make the first token if there is no token file, and show it this
        once. An empty file is kept: its tokens were revoked, and a restart must not undo
        that."""
        token = tokens.add_first(FIRST_TOKEN_LABEL)
        if token is not None:
            print(_first_token_message(token, url, tokens.path), flush=True)

    try:
        server.serve(cfg, store, tokens, on_ready=announce)
    except OSError as exc:  # the listening socket: address in use, permission denied
        print(f"plant-store: error: cannot listen on {cfg.host}:{cfg.port}: {exc.strerror}",
              file=sys.stderr)
        return 2
    return 0


def _check(cfg: config.Config) -> int:
    state = jsonfile.inspect(cfg.data_dir)  # raises CorruptJournal, reported by main
    owed, dead = len(state.outbox.list()), len(state.outbox.list(dead=True))
    print(f"{state.path}: {counted(len(state.index), 'plant')} in {state.size} bytes; OK")
    print(f"{state.path}: {counted(state.records, 'record')}, "
          f"{counted(owed, 'webhook delivery', 'webhook deliveries')} owed, "
          f"{counted(dead, 'dead letter')}")
    if state.torn:
        print(f"{state.path}: a torn last record of {state.torn} bytes will be dropped "
              "at the next start")
    return 0


def _compact(cfg: config.Config) -> int:
    try:
        store = JsonFileStore(cfg.data_dir, fsync=cfg.fsync, compact_share=0)
    except StoreLocked as exc:
        raise StoreError(f"{exc}; a running server compacts by itself") from None
    with store:
        before, after = store.compact()
    print(f"{store.path}: compacted from {before} to {after} bytes")
    return 0


def _export(cfg: config.Config, path: str) -> int:
    """Refused while a server holds the store (lock_timeout 0): one line, exit 2."""
    data_file = os.path.join(cfg.data_dir, jsonfile.DATA_FILE)
    if cfg.store == "jsonfile" and not os.path.exists(data_file):
        raise transfer.TransferError(f"{data_file} does not exist: no store to export there")
    try:
        with open_store(cfg, lock_timeout=0) as store:
            if path != "-":
                with transfer.output_file(path) as out:
                    count = transfer.export(store, out)
            else:
                count = _export_to_stdout(store)
    except KeyboardInterrupt:  # Ctrl-C
        left = "standard output has a part of it" if path == "-" else f"{path} is unchanged"
        raise transfer.TransferError(f"export interrupted; {left}") from None
    print(f"exported {count}", file=sys.stderr)
    return 0


def _export_to_stdout(store: Store) -> int:
    try:
        count = transfer.export(store, sys.stdout.buffer)
        sys.stdout.buffer.flush()
    except OSError as exc:  # a closed pipe, say: no traceback, and none at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise transfer.TransferError(f"cannot write standard output: {exc.strerror}") from None
    return count


def _import(cfg: config.Config, path: str) -> int:
    """Refused while a server holds the store (lock_timeout 0): one line, exit 2."""
    name = "standard input" if path == "-" else path
    try:
        source = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise transfer.TransferError(f"cannot read {name}: {exc.strerror}") from None
    try:
        with source, open_store(cfg, lock_timeout=0) as store:
            result = transfer.import_lines(store, source)  # Ctrl-C in it names the line
    except OSError as exc:  # the store raises StoreError: this is the input
        raise transfer.TransferError(f"cannot read {name}: {exc.strerror}") from None
    except KeyboardInterrupt:  # Ctrl-C while the store opened
        raise transfer.TransferError("import interrupted before its first line; nothing "
                                     "was imported") from None
    print(f"imported {result.created}, already there {result.replayed}", file=sys.stderr)
    return 0


def _webhooks(args: argparse.Namespace, cfg: config.Config) -> int:
    state = jsonfile.inspect(cfg.data_dir)
    dead = state.outbox.list(dead=True)
    if args.webhooks_command == "list":
        for delivery in state.outbox.list() + dead:
            status = "dead" if delivery.dead else "owed"
            print(f"{delivery.id}\t{status}\t{delivery.attempts} attempts\t{delivery.url}\t"
                  f"plant {delivery.plant_id}\t{delivery.error or ''}")
        if not len(state.outbox):
            print("no deliveries owed and no dead letters", file=sys.stderr)
        return 0
    chosen = [d.id for d in dead if not args.ids or d.id in args.ids]
    unknown = sorted(set(args.ids) - set(chosen))
    if unknown:
        raise StoreError(f"{unknown[0]} is not a dead letter; see 'plant-store webhooks list'")
    try:
        with JsonFileStore(cfg.data_dir, fsync=cfg.fsync, compact_share=0) as store:
            webhooks.retry(store, chosen)
        print(f"{counted(len(chosen), 'dead letter')} back in the outbox; the next server start "
              "sends them")
    except StoreLocked:
        webhooks.request_retry(cfg.data_dir, chosen)
        print(f"{counted(len(chosen), 'dead letter')} handed to the running server, which "
              f"sends them within {webhooks.IDLE:g} s")
    return 0


def _db(args: argparse.Namespace, cfg: config.Config) -> int:
    from plant_store.stores.postgres import connection, schema  # psycopg only when used

    if not cfg.database_url:
        raise StoreError("set database_url (or --database-url) to the PostgreSQL database")
    with connection.connect(cfg.database_url, cfg.database_timeout) as conn:
        try:
            if args.db_command == "migrate":
                applied = schema.migrate(conn)
                print("applied " + ", ".join(applied) if applied else "nothing to apply")
                return 0
            done, missing = schema.applied(conn), schema.pending(conn)
        except connection.psycopg.Error as exc:  # a table of ours taken by another schema
            raise StoreError(f"cannot {args.db_command} "
                             f"{connection.describe(cfg.database_url)}: "
                             f"{connection.reason(exc)}") from None
    print(f"schema version {max(done, default=0)}; "
          + (f"pending: {', '.join(missing)}" if missing else "nothing pending"))
    return 1 if missing else 0


def _first_token_message(token: str, url: str, path: str) -> str:
    return f"""\
No token was configured, so this one was made (label {FIRST_TOKEN_LABEL!r}; its hash is in
{path}). It is shown only this once:

    {token}

Try it:

    curl -i -X POST {url}/plants \\
      -H 'Authorization: Bearer {token}' \\
      -H 'Content-Type: application/json' \\
      -d '{{"id": 1, "name": "Monstera", "tag": "aroid"}}'
"""


def _token(args: argparse.Namespace, tokens: TokenFile) -> int:
    if args.token_command == "add":
        print(tokens.add(args.label))
    elif args.token_command == "list":
        entries = tokens.entries()
        for entry in entries:
            print(f"{entry.label}\t{entry.created}")
        if not entries:
            print(f"no tokens in {tokens.path}", file=sys.stderr)
    else:
        tokens.revoke(args.label)
        print(f"revoked {args.label!r}", file=sys.stderr)
    return 0
