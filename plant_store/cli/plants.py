"""``plant-store plants list`` and ``get``: the stored plants, read straight from the
store, beside a running server too (the JSON file is read without its lock, as ``check``
does; PostgreSQL is shared anyway)."""

import argparse
import sys

from plant_store import config, logs
from plant_store.cli import browse, transfer
from plant_store.cli.grammar import STORE, Commands, command, count, group
from plant_store.http import etags


def register(commands: Commands) -> None:
    plants = group(commands, "plants", "look at the stored plants, with their ids",
                   "plants_command")
    listing = command(plants, "list", "list the plants in creation order: id, name, tag",
                      STORE, handler=list_plants)
    listing.add_argument("--limit", type=count, metavar="N", help="at most N plants")
    get = command(plants, "get", "show one plant as JSON, id included", STORE,
                  handler=get_plant)
    get.add_argument("id", metavar="ID", help="the plant's id")


def get_plant(args: argparse.Namespace, cfg: config.Config) -> int:
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


def list_plants(args: argparse.Namespace, cfg: config.Config) -> int:
    for plant in browse.walk(cfg, args.limit):  # no tag, no field: an empty one is a tag
        tag = "" if plant.tag is None else f"\t{logs.escape(plant.tag)}"
        print(f"{plant.id}\t{logs.escape(plant.name)}{tag}")
    return 0
