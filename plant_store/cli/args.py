"""The command line's grammar: each command with a description and only the settings it
uses, each flag showing what its value is, its default and its environment variable.

Settings come from every source for every command (an INI file may hold them all), but a
command parses only those it reads (``args.reads``), so a value meant for another never
fails it; it offers them as flags, so ``--help`` shows what matters to it.
"""

import argparse
import difflib
import itertools
from collections.abc import Sequence
from typing import Any

from plant_store import __version__, config
from plant_store.cli import shipped

DESCRIPTION = "Plant Store: a small WSGI service that keeps a store of plants."
EPILOG = """\
Settings, lowest precedence first: their defaults, an INI file (--config FILE or
PLANT_STORE_CONFIG), environment variables (PLANT_STORE_PORT=9000), flags (--port 9000).
'plant-store COMMAND --help' shows a command's settings; 'plant-store config example'
lists them all.
"""

ALL = tuple(s.name for s in config.SETTINGS)
DATABASE = ("database_url", "database_timeout", "statement_timeout",
            "database_prepared_statements")
STORE = ("store", "data_dir", *DATABASE)
TOKENS = ("data_dir", "token_file")


class _Parser(argparse.ArgumentParser):
    """A parser whose mistakes are told by the command they were made in: an unknown
    argument with that command's usage (argparse leaves them to the top, whose usage is no
    help), and a mistyped flag or action with the nearest one it takes."""

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


def _count(text: str) -> int:
    if not config.INTEGER.fullmatch(text) or not 1 <= int(text) <= 2**31 - 1:
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


def _command(commands: "argparse._SubParsersAction[_Parser]", name: str, text: str,
             settings: tuple[str, ...] | None = (),
             reads: tuple[str, ...] = ()) -> _Parser:
    """A command: ``text`` is its line in the parent's list and its own description;
    ``settings`` None for a group of commands (which takes no settings itself). The command
    reads ``settings`` and ``reads`` (not offered as flags: the store, only to refuse one
    that is not the JSON-file store), and no others (``args.reads``)."""
    parser = commands.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
    if settings is not None:
        _settings(parser, settings)
        parser.set_defaults(reads=frozenset(settings + reads))
    return parser


def _group(commands: "argparse._SubParsersAction[_Parser]", name: str, text: str,
           dest: str) -> "argparse._SubParsersAction[_Parser]":
    parser = _command(commands, name, text, None)
    return parser.add_subparsers(dest=dest, required=True, metavar="ACTION")


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="plant-store", description=DESCRIPTION, epilog=EPILOG,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = _command(commands, "serve", "run the HTTP service on waitress (or granian) "
                                        "until SIGTERM, SIGHUP or Ctrl-C", ALL)
    serve.add_argument("--no-first-token", action="store_true",
                       help="make and print no first token when there is no token file (a "
                            "service whose output others read: issue one with 'plant-store "
                            "token add'); the default under systemd's journal")

    plants = _group(commands, "plants", "look at the stored plants, with their ids",
                    "plants_command")
    listing = _command(plants, "list", "list the plants in creation order: id, name, tag",
                       STORE)
    listing.add_argument("--limit", type=_count, metavar="N", help="at most N plants")
    get = _command(plants, "get", "show one plant as JSON, id included", STORE)
    get.add_argument("id", metavar="ID", help="the plant's id")

    token = _group(commands, "token", "issue, list and revoke bearer tokens", "token_command")
    add = _command(token, "add", "issue a token and print it, this once", TOKENS)
    add.add_argument("--label", required=True, help="a name for whoever holds the token")
    _command(token, "list", "show each token's label and creation time, never the token",
             TOKENS)
    revoke = _command(token, "revoke", "revoke a token; servers refuse it within a second",
                      TOKENS)
    revoke.add_argument("label", metavar="LABEL", help="the label given to 'token add'")

    hooks = _group(commands, "webhooks", "see the webhook outbox, send dead letters again, "
                                         "make a secret",
                   "webhooks_command")
    _command(hooks, "list", "show deliveries still owed and dead letters; changes nothing, "
                            "works beside running servers", STORE)
    resend = _command(hooks, "retry", "put dead letters back in the outbox to be sent again, "
                                      "by a running server too", (*STORE, "fsync"))
    resend.add_argument("ids", nargs="*", metavar="ID", help="delivery ids; none means all")
    _command(hooks, "secret", "print a new whsec_ secret for webhook_secret; reads no settings",
             None)

    settings = _group(commands, "config", "the settings", "config_command")
    example = _command(settings, "example", "print every setting with its default and what "
                       "it does, as an INI file to edit and pass to --config; or, named, an "
                       "example configuration of a proxy or a service manager", None)
    example.add_argument("name", nargs="?", choices=sorted(shipped.EXAMPLES), metavar="NAME",
                         help="one of: " + ", ".join(sorted(shipped.EXAMPLES)))
    docs = _command(commands, "docs", "print a page of the documentation (the wheel carries "
                                      "them); without PAGE, list the pages", None)
    docs.add_argument("page", nargs="?", metavar="PAGE", help="a page's name, as listed")

    _command(commands, "check", "read the JSON-file store and report its state; changes "
                                "nothing, works beside a running server", ("data_dir",), ("store",))
    _command(commands, "compact", "rewrite the JSON-file store without its dead records "
                                  "(server stopped: a running one compacts by itself)",
             ("data_dir", "fsync"), ("store",))

    export = _command(commands, "export", "write every plant as JSON Lines, one NewPlant a "
                                          "line, in creation order (a JSON-file store's server "
                                          "stopped)", STORE)
    export.add_argument("--output", metavar="FILE", default="-",
                        help="file to write, replaced only once whole [default: standard "
                             "output]")
    load = _command(commands, "import", "create the plants of a JSON Lines file in its "
                                        "order, skipping those already there (a "
                                        "JSON-file store's server stopped); run it again "
                                        "to resume",
                    (*STORE, "fsync", "max_body_size"))
    load.add_argument("--input", metavar="FILE", default="-",
                      help="file to read [default: standard input]")

    db = _group(commands, "db", "the PostgreSQL store's schema", "db_command")
    _command(db, "migrate", "apply pending schema migrations (a starting server does too)",
             DATABASE)
    _command(db, "check", "show the schema version and what is pending; exit status 1 when "
                          "something is", DATABASE)
    _command(db, "rebase", "move new plants' positions above every earlier one: run after "
                           "restoring a physical backup or disk snapshot as the primary",
             DATABASE)
    return top
