"""The ``plant-store`` program: its parser, each command group's part added by the module
that runs it (``serve``, ``plants``, ``store_commands``, ``webhook_commands``, ``docs``;
the pieces are :mod:`~plant_store.cli.grammar`'s), and :func:`main`: parse, load the
settings, run the command's handler. The order of :data:`GROUPS` is the order ``--help``
lists them in.

Every failure an operator can cause (bad setting, unwritable data directory, locked store,
unknown token label) ends with one line on stderr and exit status 2, not a traceback.
"""

import argparse
import os
import sys

from plant_store import __version__, config, logs
from plant_store.cli import docs, plants, serve, store_commands, webhook_commands
from plant_store.cli.grammar import Parser, drop_stdout
from plant_store.stores import DataDirError, StoreError
from plant_store.tokens import TokenError, TokenFileError

DESCRIPTION = "Plant Store: a small WSGI service that keeps a store of plants."
EPILOG = """\
Settings, lowest precedence first: their defaults, an INI file (--config FILE or
PLANT_STORE_CONFIG), environment variables (PLANT_STORE_PORT=9000), flags (--port 9000).
'plant-store COMMAND --help' shows a command's settings; 'plant-store config example'
lists them all.
"""

# Each command group's register(commands), in --help's order.
GROUPS = (serve.register, plants.register, store_commands.register_tokens,
          webhook_commands.register, docs.register, store_commands.register,
          store_commands.register_db)


def parser() -> argparse.ArgumentParser:
    top = Parser(prog="plant-store", description=DESCRIPTION, epilog=EPILOG,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in GROUPS:
        register(commands)
    # The whole grammar, handed to the handlers as a value (the docs' command-line page is
    # its help): the modules that register the commands are below this one.
    top.set_defaults(grammar=top)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.reads is None:  # config example, docs, webhooks secret: no setting read
        code: int = args.handler(args)
        return code
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
            code = args.handler(args, cfg)
            return code
        except DataDirError as exc:
            raise cfg.blame("data_dir", str(exc)) from None
        except TokenFileError as exc:
            raise cfg.blame("token_file", str(exc)) from None
    except (config.ConfigError, StoreError, TokenError, plants.TransferError) as exc:
        logs.drain()  # a server's lines logged before it come first (bounded)
        print(f"plant-store: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader stopped early (| head): not an error to report
        drop_stdout()  # nor at exit
        return 1
    except KeyboardInterrupt:  # Ctrl-C in a command that has nothing to undo
        print("plant-store: interrupted", file=sys.stderr)
        return 130
