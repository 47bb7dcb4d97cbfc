"""The ``plant-store`` command: serve, check and compact the store, export and import its
plants, tokens, webhooks.

Every failure an operator can cause (bad setting, unwritable data directory, locked store,
unknown token label) ends with one line on stderr and exit status 2, not a traceback.
"""

import argparse
import errno
import logging
import os
import shlex
import socket
import sys

from plant_store import config, logs
from plant_store.cli import args as cli_args
from plant_store.cli import browse, shipped, transfer
from plant_store.http import etags
from plant_store.service import Service
from plant_store.serving import clear_text, server
from plant_store.stores import (
    DataDirError,
    JsonFileStore,
    Store,
    StoreError,
    jsonfile,
    needs_driver,
    open_store,
)
from plant_store.stores.lock import StoreLocked
from plant_store.stores.outbox import Delivery
from plant_store.tokens import TokenError, TokenFile, TokenFileError
from plant_store.util.words import counted
from plant_store.webhooks import retry_requests
from plant_store.webhooks import worker as webhooks

FIRST_TOKEN_LABEL = "initial"
log = logging.getLogger("plant_store.cli")  # the name users filter on


def main(argv: list[str] | None = None) -> int:
    args = cli_args.parser().parse_args(argv)
    if args.command == "config":  # config example: the settings' table, no value read
        print(shipped.example(args.name) if args.name else config.example_ini(), end="")
        return 0
    if args.command == "docs":
        return _docs(args.page)
    if args.command == "webhooks" and args.webhooks_command == "secret":
        print(webhooks.new_secret())  # no settings read: the one set may be what it replaces
        return 0
    flags = {s.name: getattr(args, s.name, None) for s in config.SETTINGS}
    try:
        cfg = config.load(args.config or os.environ.get("PLANT_STORE_CONFIG"), os.environ, flags,
                          only=args.reads)
        # A command prints its own result; the store's info lines would say it twice.
        level = cfg.log_level if args.command == "serve" else max(
            cfg.log_level, "warning", key=logs.LOG_LEVELS.index)
        # A server's lines through a queue: a stalled stderr holds no thread of it.
        logs.configure(level, cfg.log_format, queued=args.command == "serve")
        try:
            return _run(args, cfg)
        except DataDirError as exc:
            raise cfg.blame("data_dir", str(exc)) from None
        except TokenFileError as exc:
            raise cfg.blame("token_file", str(exc)) from None
    except (config.ConfigError, StoreError, TokenError, transfer.TransferError) as exc:
        logs.drain()  # a server's lines logged before it come first (bounded)
        print(f"plant-store: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader stopped early (| head): not an error to report
        _drop_stdout()  # nor at exit
        return 1
    except KeyboardInterrupt:  # Ctrl-C in a command that has nothing to undo
        print("plant-store: interrupted", file=sys.stderr)
        return 130


def _drop_stdout() -> None:
    """Standard output points at /dev/null from here on, so that Python's own flush at exit
    does not report the closed pipe again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _run(args: argparse.Namespace, cfg: config.Config) -> int:
    if args.command == "serve":
        return _serve(cfg, TokenFile(cfg.token_file), first_token=not args.no_first_token)
    if args.command == "plants":
        return _plants(args, cfg)
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
    return _token(args, TokenFile(cfg.token_file))


def _serve(cfg: config.Config, tokens: TokenFile, first_token: bool = True) -> int:
    # Read when the metrics were imported; granian's workers count there (granian_adapter).
    if cfg.server == "waitress" and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        raise StoreError("PROMETHEUS_MULTIPROC_DIR is set, but 'plant-store serve' is one "
                         "process and counts its metrics itself: unset it (it is for the "
                         "workers of a pre-fork server)")
    try:  # as waitress will look it up; its own error would be a traceback
        found = socket.getaddrinfo(cfg.host, cfg.port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise cfg.blame("host", f"cannot listen on {cfg.host}:{cfg.port}: {reason}") from None
    _check_port(cfg)
    if cfg.server == "waitress" and cfg.workers > 1:
        raise cfg.blame("workers", "waitress is one process; several workers are for "
                                   "server = granian (on store = postgresql)")
    if cfg.server == "waitress" and cfg.tls_certificate:
        raise cfg.blame("tls_certificate", "waitress serves no TLS: serve with server = "
                                           "granian, or terminate TLS at a proxy "
                                           "('plant-store docs tls')")
    clear_text.warn_if_exposed(cfg, [str(address[4][0]) for address in found],
                               tls=bool(cfg.tls_certificate))
    # Under granian each worker process opens the service, after the fork.
    service = Service(cfg, tokens=tokens) if cfg.server == "waitress" else None

    def announce(url: str) -> None:
        """Once listening, make the first token if there is no token file, and show it this
        once. An empty file is kept: its tokens were revoked, and a restart must not undo
        that. Not with --no-first-token, nor when standard output is the journal (systemd
        says so in JOURNAL_STREAM): a token written where others read it is theirs too; say
        how to make one instead."""
        if not first_token or os.environ.get("JOURNAL_STREAM"):
            if not tokens.entries():
                log.warning("no tokens in %s: every API request is refused (401) until one is "
                            "made: plant-store token add --token-file %s --label LABEL",
                            os.path.abspath(tokens.path), shlex.quote(tokens.path))
            return
        token = tokens.add_first(FIRST_TOKEN_LABEL)
        if token is not None:
            print(_first_token_message(token, url, os.path.abspath(tokens.path)), flush=True)

    try:
        if service is None:
            server.serve_granian(cfg, on_ready=announce)
        else:
            server.serve(service, on_ready=announce)  # serve closes it
    except OSError as exc:  # the listening socket: address in use, permission denied
        culprit = "host" if exc.errno == errno.EADDRNOTAVAIL or exc.errno is None else "port"
        raise cfg.blame(culprit, f"cannot listen on {cfg.host}:{cfg.port}: "
                                 f"{exc.strerror or exc}") from None
    return 0


def _check_port(cfg: config.Config) -> None:
    """Refuse a port another process listens on (port, probe_port) before the store is
    opened, so that a start that cannot listen makes no data directory nor lock file in it.
    Bound as waitress binds (SO_REUSEADDR) and let go at once; only "in use" and "denied"
    are told here, anything else is left to the real listen (a race that loses here fails
    there, as before)."""
    for name in ("port", "probe_port"):
        port = getattr(cfg, name)
        if not port:
            continue
        found = socket.getaddrinfo(cfg.host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in found:
            try:
                with socket.socket(family, kind, proto) as sock:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    if family == socket.AF_INET6:
                        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    sock.bind(address)
            except OSError as exc:
                if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                    raise cfg.blame(name, f"cannot listen on {cfg.host}:{port}: "
                                          f"{exc.strerror}") from None


def _check(cfg: config.Config) -> int:
    _need_journal(cfg, "check")
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


def _plants(args: argparse.Namespace, cfg: config.Config) -> int:
    """Read the store directly: beside a running server too (the JSON file is read without
    its lock, as ``check`` does; PostgreSQL is shared anyway)."""
    if args.plants_command == "get":
        plant_id = browse.parse_id(args.id)
        found = browse.fetch(cfg, plant_id)
        if found is None:
            print(f"plant-store: there is no plant with id {plant_id}", file=sys.stderr)
            return 1
        sys.stdout.buffer.write(transfer.encode(found.plant))
        sys.stdout.flush()
        # On stderr: stdout stays one NewPlant, as 'plants import' reads it.
        print(f"ETag: {etags.etag(found.version)}", file=sys.stderr)
        return 0
    for plant in browse.walk(cfg, args.limit):  # no tag, no field: an empty one is a tag
        tag = "" if plant.tag is None else f"\t{logs.escape(plant.tag)}"
        print(f"{plant.id}\t{logs.escape(plant.name)}{tag}")
    return 0


def _need_journal(cfg: config.Config, command: str) -> None:
    """These commands read the JSON-file store's journal; say so rather than make one."""
    if cfg.store != "jsonfile":
        raise cfg.blame("store", f"'plant-store {command}' reads the JSON-file store only")
    path = os.path.join(cfg.data_dir, jsonfile.DATA_FILE)
    if not os.path.lexists(path):
        raise DataDirError(f"{os.path.abspath(path)} does not exist: no JSON-file store there")


def _compact(cfg: config.Config) -> int:
    _need_journal(cfg, "compact")
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


def _export(cfg: config.Config, path: str) -> int:
    """Refused while a server holds the store (lock_timeout 0): one line, exit 2. It only
    reads: a PostgreSQL schema that lacks migrations is refused, not migrated."""
    _need_lasting(cfg, "export")
    if cfg.store == "jsonfile":
        _need_journal(cfg, "export")
    try:
        with open_store(cfg, lock_timeout=0, migrate=False) as store:
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
        _drop_stdout()
        raise transfer.TransferError(f"cannot write standard output: {exc.strerror}") from None
    return count


def _import(cfg: config.Config, path: str) -> int:
    """Refused while a server holds the store (lock_timeout 0): one line, exit 2."""
    _need_lasting(cfg, "import")
    name = "standard input" if path == "-" else path
    try:
        source = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise transfer.TransferError(f"cannot read {name}: {exc.strerror}") from None
    try:
        with source, open_store(cfg, lock_timeout=0) as store:
            # Ctrl-C in it names the line
            result = transfer.import_lines(store, source, cfg.max_body_size)
    except OSError as exc:  # the store raises StoreError: this is the input
        raise transfer.TransferError(f"cannot read {name}: {exc.strerror}") from None
    except KeyboardInterrupt:  # Ctrl-C while the store opened
        raise transfer.TransferError("import interrupted before its first line; nothing "
                                     "was imported") from None
    print(f"imported {result.created}, already there {result.replayed}", file=sys.stderr)
    return 0


def _webhooks(args: argparse.Namespace, cfg: config.Config) -> int:
    if cfg.store == "postgresql":
        return _webhooks_shared(args, cfg)
    if cfg.store == "memory":
        raise cfg.blame("store", "the memory store's outbox lives in its server's process and "
                                 "goes with it: no command can read it")
    _need_journal(cfg, "webhooks")
    state = jsonfile.inspect(cfg.data_dir)
    dead = state.outbox.list(dead=True)
    if args.webhooks_command == "list":
        _list_deliveries(state.outbox.list() + dead)
        return 0
    chosen = [d.id for d in dead if not args.ids or d.id in args.ids]
    unknown = sorted(set(args.ids) - set(chosen))
    if unknown:
        raise StoreError(f"{unknown[0]} is not a dead letter; see 'plant-store webhooks list'")
    if not chosen:
        print("no dead letters to retry", file=sys.stderr)
        return 0
    letters = counted(len(chosen), "dead letter")
    try:
        with JsonFileStore(cfg.data_dir, fsync=cfg.fsync, compact_share=0) as store:
            webhooks.retry(store, chosen)
        print(f"{letters} back in the outbox; the next server start with webhook_secret set "
              "sends them")
        return 0
    except StoreLocked:
        pass
    return _hand_over(cfg, chosen, letters)


def _list_deliveries(deliveries: list[Delivery]) -> None:
    for delivery in deliveries:
        status = "dead" if delivery.dead else "owed"
        print(f"{delivery.id}\t{status}\t{delivery.attempts} attempts\t{delivery.url}\t"
              f"plant {delivery.plant_id}\t{delivery.error or ''}")
    if not deliveries:
        print("no deliveries owed and no dead letters", file=sys.stderr)


def _webhooks_shared(args: argparse.Namespace, cfg: config.Config) -> int:
    """PostgreSQL: the command reads and writes the outbox itself, beside any number of
    running instances; a retry is one transaction (Store.retry_dead), and the instances'
    workers find the dead letters back in their lanes. Migrates nothing."""
    with open_store(cfg, migrate=False) as store:
        if args.webhooks_command == "list":
            _list_deliveries(store.outbox())
            return 0
        try:
            moved = store.retry_dead(args.ids or None)
        except KeyError as exc:
            raise StoreError(f"{exc.args[0]} is not a dead letter, so nothing changed; see "
                             "'plant-store webhooks list'") from None
    if not moved:
        print("no dead letters to retry", file=sys.stderr)
        return 0
    print(f"{counted(len(moved), 'dead letter')} back in the outbox: an instance running on "
          f"this database with webhook_secret sends them within {webhooks.IDLE:g} s, or the "
          "next one started")
    return 0


def _hand_over(cfg: config.Config, chosen: list[str], letters: str) -> int:
    """Retry dead letters through the server that holds the store (retry_requests)."""
    wait = webhooks.IDLE + 2  # the running server's worker looks every IDLE seconds
    request = retry_requests.submit(cfg.data_dir, chosen)
    try:
        taken = retry_requests.wait(request, wait)
    except KeyboardInterrupt:
        raise StoreError("interrupted; the request was withdrawn before the server took "
                         "it, so nothing changed") from None
    if not taken:
        raise StoreError(f"the server running on {os.path.abspath(cfg.data_dir)} did not take "
                         f"the request within {wait:g} s, so nothing changed: it sends webhooks "
                         "only when started with webhook_secret")
    if not retry_requests.acted(request, wait):
        raise StoreError("the running server took the request but has not put the dead "
                         "letters back yet (is its store failing? see its log)")
    print(f"{letters} back in the outbox of the running server, which sends them now")
    return 0


def _db(args: argparse.Namespace, cfg: config.Config) -> int:
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


def _docs(name: str | None) -> int:
    if name is None:
        for page, title in shipped.pages().items():
            print(f"{page}\t{title}")
        return 0
    try:
        text = shipped.page(name)
    except KeyError:
        print(f"plant-store: error: there is no page {name!r}; 'plant-store docs' lists them",
              file=sys.stderr)
        return 2
    print(text, end="")
    return 0


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
