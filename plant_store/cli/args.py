"""The command line's grammar: the top parser, and each command group's part from the
module that runs it (its ``register`` adds the commands, their flags and handlers; the
pieces are in :mod:`~plant_store.cli.grammar`). The order here is the order ``--help``
lists them in."""

import argparse

from plant_store import __version__
from plant_store.cli import db, docs, plants, serve, store_commands, tokens, webhook_commands
from plant_store.cli.grammar import Parser

DESCRIPTION = "Plant Store: a small WSGI service that keeps a store of plants."
EPILOG = """\
Settings, lowest precedence first: their defaults, an INI file (--config FILE or
PLANT_STORE_CONFIG), environment variables (PLANT_STORE_PORT=9000), flags (--port 9000).
'plant-store COMMAND --help' shows a command's settings; 'plant-store config example'
lists them all.
"""

GROUPS = (serve, plants, tokens, webhook_commands, docs, store_commands, db)


def parser() -> argparse.ArgumentParser:
    top = Parser(prog="plant-store", description=DESCRIPTION, epilog=EPILOG,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.register(commands)
    # The whole grammar, handed to the handlers as a value (the docs' command-line page is
    # its help): the modules that register the commands are below this one.
    top.set_defaults(grammar=top)
    return top
