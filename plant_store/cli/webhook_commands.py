"""``plant-store webhooks list``, ``retry`` and ``secret``: the outbox seen, dead letters
sent again, a secret made. On PostgreSQL the command reads and writes the outbox itself,
beside any number of running instances; on the JSON file it reads the journal, and a
retry while a server holds the store is handed to that server (retry_requests)."""

import argparse
import os
import sys

from plant_store import config
from plant_store.cli.grammar import STORE, Commands, command, group, need_journal
from plant_store.stores import JsonFileStore, StoreError, jsonfile, open_store
from plant_store.stores.lock import StoreLocked
from plant_store.stores.records import Delivery
from plant_store.util.words import counted
from plant_store.webhooks import retry_requests
from plant_store.webhooks import worker as webhooks


def register(commands: Commands) -> None:
    hooks = group(commands, "webhooks", "see the webhook outbox, send dead letters again, "
                                        "make a secret",
                  "webhooks_command")
    command(hooks, "list", "show deliveries still owed and dead letters; changes nothing, "
                           "works beside running servers", STORE, handler=list_deliveries)
    resend = command(hooks, "retry", "put dead letters back in the outbox to be sent again, "
                                     "by a running server too", (*STORE, "fsync"),
                     handler=retry)
    resend.add_argument("ids", nargs="*", metavar="ID", help="delivery ids; none means all")
    command(hooks, "secret", "print a new whsec_ secret for webhook_secret; reads no settings",
            None, handler=secret)


def secret(args: argparse.Namespace) -> int:
    print(webhooks.new_secret())  # no settings read: the one set may be what it replaces
    return 0


def list_deliveries(args: argparse.Namespace, cfg: config.Config) -> int:
    """Changes nothing; PostgreSQL's schema is not migrated."""
    if cfg.store == "postgresql":
        with open_store(cfg, migrate=False) as store:
            _print(store.outbox())
        return 0
    state = _journal(cfg)
    _print(state.deliveries() + state.deliveries(dead=True))
    return 0


def retry(args: argparse.Namespace, cfg: config.Config) -> int:
    if cfg.store == "postgresql":
        return _retry_shared(args, cfg)
    dead = _journal(cfg).deliveries(dead=True)
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


def _journal(cfg: config.Config) -> jsonfile.Snapshot:
    """The JSON-file store's state, read from its journal without its lock."""
    if cfg.store == "memory":
        raise cfg.blame("store", "the memory store's outbox lives in its server's process and "
                                 "goes with it: no command can read it")
    need_journal(cfg, "webhooks")
    return jsonfile.Snapshot(cfg.data_dir)


def _print(deliveries: list[Delivery]) -> None:
    for delivery in deliveries:
        status = "dead" if delivery.dead else "owed"
        print(f"{delivery.id}\t{status}\t{delivery.attempts} attempts\t{delivery.url}\t"
              f"plant {delivery.plant_id}\t{delivery.error or ''}")
    if not deliveries:
        print("no deliveries owed and no dead letters", file=sys.stderr)


def _retry_shared(args: argparse.Namespace, cfg: config.Config) -> int:
    """PostgreSQL: a retry is one transaction (Store.retry_dead), and the instances'
    workers find the dead letters back in their lanes. Migrates nothing."""
    with open_store(cfg, migrate=False) as store:
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
