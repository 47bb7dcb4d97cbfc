"""What several commands share: the refusal of a command that needs the JSON-file store's
journal, and standard output let go once its reader has gone."""

import os
import sys

from plant_store import config
from plant_store.stores import DataDirError, jsonfile


def need_journal(cfg: config.Config, command: str) -> None:
    """These commands read the JSON-file store's journal; say so rather than make one."""
    if cfg.store != "jsonfile":
        raise cfg.blame("store", f"'plant-store {command}' reads the JSON-file store only")
    path = os.path.join(cfg.data_dir, jsonfile.DATA_FILE)
    if not os.path.lexists(path):
        raise DataDirError(f"{os.path.abspath(path)} does not exist: no JSON-file store there")


def drop_stdout() -> None:
    """Standard output points at /dev/null from here on, so that Python's own flush at exit
    does not report the closed pipe again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
