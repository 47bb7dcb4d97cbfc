"""``plant-store docs [PAGE]`` and ``plant-store config example [NAME]``: what the wheel
carries to read (the documentation's pages, the settings as an INI file, the example
configurations of proxies and service managers); neither reads a setting."""

import argparse
import sys

from plant_store import config
from plant_store.cli import page_text, reference, shipped
from plant_store.cli.grammar import Commands, command, group


def register(commands: Commands) -> None:
    settings = group(commands, "config", "the settings", "config_command")
    example = command(settings, "example", "print every setting with its default and what "
                      "it does, as an INI file to edit and pass to --config; or, named, an "
                      "example configuration of a proxy or a service manager", None,
                      handler=config_example)
    example.add_argument("name", nargs="?", choices=sorted(shipped.EXAMPLES), metavar="NAME",
                         help="one of: " + ", ".join(sorted(shipped.EXAMPLES)))
    docs = command(commands, "docs", "print a page of the documentation (the wheel carries "
                                     "them); without PAGE, list the pages", None,
                   handler=show_docs)
    docs.add_argument("page", nargs="?", metavar="PAGE", help="a page's name, as listed")


def config_example(args: argparse.Namespace) -> int:
    """The settings' table (or a shipped example), no value read."""
    print(shipped.example(args.name) if args.name else config.example_ini(), end="")
    return 0


def show_docs(args: argparse.Namespace) -> int:
    if args.page is None:
        for page, title in shipped.pages().items():
            print(f"{page}\t{title}")
        return 0
    try:
        text = page_text.text(args.page, reference.generated(args.grammar))
    except KeyError:
        print(f"plant-store: error: there is no page {args.page!r}; 'plant-store docs' lists "
              "them", file=sys.stderr)
        return 2
    print(text, end="")
    return 0
