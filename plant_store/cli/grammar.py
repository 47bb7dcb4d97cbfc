"""The pieces of the command line's grammar that each command group builds its part with:
a command with a description and only the settings it uses, each flag showing what its
value is, its default and its environment variable, and the handler that runs it; and
what several handlers share: the refusal of a command that needs the JSON-file store's
journal, and standard output let go once its reader has gone.

Settings come from every source for every command (an INI file may hold them all), but a
command parses only those it reads (``args.reads``), so a value meant for another never
fails it; it offers them as flags, so ``--help`` shows what matters to it.
"""

import argparse
import difflib
import itertools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeAlias

from plant_store import config
from plant_store.stores import DataDirError, jsonfile
from plant_store.util import words

# A command's handler: the parsed arguments and the loaded settings; its exit status.
Handler = Callable[[argparse.Namespace, config.Config], int]
# A command that reads no settings (reads None): the parsed arguments only.
Bare = Callable[[argparse.Namespace], int]
Commands: TypeAlias = "argparse._SubParsersAction[Parser]"  # a parser's list of commands

ALL = tuple(s.name for s in config.SETTINGS)
DATABASE = ("database_url", "database_timeout", "statement_timeout",
            "database_prepared_statements")
STORE = ("store", "data_dir", *DATABASE)
TOKENS = ("data_dir", "token_file")


class Parser(argparse.ArgumentParser):
    """A parser whose mistakes are told by the command they were made in (argparse leaves
    an unknown argument to the top), in two lines: the error, with the nearest flag or
    action it takes to one mistyped, then where its help is. The usage is not printed: a
    command's usage is as long as its settings (33 lines for ``serve``), and the error
    would scroll away above it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\nsee {self.prog} --help\n")

    def parse_known_args(
            self, args: Sequence[str] | None = None, namespace: Any = None,
    ) -> tuple[Any, list[str]]:
        if args is not None and self._subparsers is None:  # a command's own flags: a
            for arg in itertools.takewhile(lambda a: a != "--", args):  # typo before what
                name = arg.split("=", 1)[0]  # it leaves missing (--lable for --label)
                if name.startswith("--") and not any(
                        flag.startswith(name) for flag in self._option_string_actions):
                    self._unrecognized([arg])
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self._unrecognized(extras)
        return namespace, extras

    def _unrecognized(self, extras: list[str]) -> None:
        message = "unrecognized arguments: " + " ".join(extras)
        flags = [arg.split("=", 1)[0] for arg in extras if arg.startswith("-")]
        near = flags and difflib.get_close_matches(flags[0], self._option_string_actions, 1)
        self.error(f"{message}; did you mean {near[0]}?" if near else message)

    def _check_value(self, action: argparse.Action, value: object) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            near = difflib.get_close_matches(str(value), [str(c) for c in action.choices or ()], 1)
            if not near:
                raise
            raise argparse.ArgumentError(action, f"{exc.message}; did you mean {near[0]!r}?"
                                         ) from None


def count(text: str) -> int:
    if not words.INTEGER.fullmatch(text) or not 1 <= int(text) <= 2**31 - 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer from 1 to {2**31 - 1}")
    return int(text)


def _shown(setting: config.Setting) -> str:
    return setting.default if setting.default else "empty"


def _settings(parser: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    group = parser.add_argument_group(
        "settings (a flag overrides the environment variable, which overrides --config)")
    group.add_argument("--config", metavar="FILE",
                       help="INI file with a [plant-store] section [env PLANT_STORE_CONFIG]")
    for name in names:
        setting = config.BY_NAME[name]
        group.add_argument(setting.flag, dest=name, metavar=setting.metavar,
                           help=f"{setting.help} [default: {_shown(setting)}; "
                                f"env {setting.env}]")


def command(commands: Commands, name: str, text: str,
            settings: tuple[str, ...] | None = (), reads: tuple[str, ...] = (), *,
            handler: Handler | Bare | None = None) -> Parser:
    """A command: ``text`` is its line in the parent's list and its own description;
    ``settings`` None for a group of commands (which takes no settings itself, nor a
    handler) or a command that reads none (``handler`` is Bare). The command reads
    ``settings`` and ``reads`` (not offered as flags: the store, only to refuse one that is
    not the JSON-file store), and no others (``args.reads``); ``handler`` runs it."""
    parser = commands.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
    if settings is not None:
        _settings(parser, settings)
        parser.set_defaults(reads=frozenset(settings + reads))
    elif handler is not None:
        parser.set_defaults(reads=None)
    if handler is not None:
        parser.set_defaults(handler=handler)
    return parser


def group(commands: Commands, name: str, text: str, dest: str) -> Commands:
    """A group of commands (plant-store token add, list, revoke), each its own handler."""
    parser = command(commands, name, text, None)
    return parser.add_subparsers(dest=dest, required=True, metavar="ACTION")


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
