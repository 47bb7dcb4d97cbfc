"""The ``plant-store`` command: parse, load the settings, run the command's handler (each
command group's module registers its own: serve, plants, tokens, webhook_commands,
store_commands, db, docs).

Every failure an operator can cause (bad setting, unwritable data directory, locked store,
unknown token label) ends with one line on stderr and exit status 2, not a traceback.
"""

import os
import sys

from plant_store import config, logs
from plant_store.cli import args as cli_args
from plant_store.cli import transfer
from plant_store.cli.common import drop_stdout
from plant_store.stores import DataDirError, StoreError
from plant_store.tokens import TokenError, TokenFileError


def main(argv: list[str] | None = None) -> int:
    args = cli_args.parser().parse_args(argv)
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
    except (config.ConfigError, StoreError, TokenError, transfer.TransferError) as exc:
        logs.drain()  # a server's lines logged before it come first (bounded)
        print(f"plant-store: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader stopped early (| head): not an error to report
        drop_stdout()  # nor at exit
        return 1
    except KeyboardInterrupt:  # Ctrl-C in a command that has nothing to undo
        print("plant-store: interrupted", file=sys.stderr)
        return 130
