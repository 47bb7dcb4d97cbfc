"""The generated reference pages, written at build time into ``_generated/`` by the same
functions ``plant-store docs`` renders them with (``plant_store.cli.docs``), so the site
and the wheel's pages have one source."""

import pathlib

from plant_store.cli import program as args
from plant_store.cli.docs import generated


def version() -> str:
    import plant_store
    return plant_store.__version__


def write_all(folder: pathlib.Path) -> None:
    folder.mkdir(exist_ok=True)
    for name, make in generated(args.parser()).items():
        text = make()
        path = folder / name
        if not path.exists() or path.read_text("utf-8") != text:  # keep mtimes for rebuilds
            path.write_text(text, "utf-8")
