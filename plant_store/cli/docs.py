"""``plant-store docs [PAGE]`` and ``plant-store config example [NAME]``: what the wheel
carries to read (the documentation's pages, the settings as an INI file, the example
configurations of proxies and service managers); neither reads a setting.

And the generated reference pages, as reStructuredText, each written from the real
declaration so none is a copy that can drift: one source for the site (``docs/conf.py``
writes them into ``docs/_generated/`` as it builds) and for ``plant-store docs`` (which
renders the same text where a page includes it):

- ``settings.rst``: a table of ``plant_store.config.SETTINGS`` (name, default, environment
  variable, flag, help);
- ``http.rst``: every path and method of ``plant_store/http/openapi.json``, its parameters and
  each status it may answer;
- ``cli.rst``: the ``--help`` of ``plant-store`` and of every sub-command, from the parser
  in ``plant_store.cli.program`` (handed in: it imports the commands, which print these).
"""

import argparse
import importlib.resources
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from plant_store import config
from plant_store.cli import pages
from plant_store.cli.grammar import Commands, command, group


def register(commands: Commands) -> None:
    settings = group(commands, "config", "the settings", "config_command")
    example = command(settings, "example", "print every setting with its default and what "
                      "it does, as an INI file to edit and pass to --config; or, named, an "
                      "example configuration of a proxy or a service manager", None,
                      handler=config_example)
    example.add_argument("name", nargs="?", choices=sorted(pages.EXAMPLES), metavar="NAME",
                         help="one of: " + ", ".join(sorted(pages.EXAMPLES)))
    docs = command(commands, "docs", "print a page of the documentation (the wheel carries "
                                     "them); without PAGE, list the pages", None,
                   handler=show_docs)
    docs.add_argument("page", nargs="?", metavar="PAGE", help="a page's name, as listed")


def config_example(args: argparse.Namespace) -> int:
    """The settings' table (or a shipped example), no value read."""
    print(pages.example(args.name) if args.name else config.example_ini(), end="")
    return 0


def show_docs(args: argparse.Namespace) -> int:
    if args.page is None:
        for page, title in pages.pages().items():
            print(f"{page}\t{title}")
        return 0
    try:
        text = pages.text(args.page, generated(args.grammar))
    except KeyError:
        print(f"plant-store: error: there is no page {args.page!r}; 'plant-store docs' lists "
              "them", file=sys.stderr)
        return 2
    print(text, end="")
    return 0


METHODS = ("get", "head", "post", "put", "patch", "delete", "options")
WIDTH = 88  # argparse wraps to the terminal; the page has a width


def _cell(text: str) -> str:
    """Prose from the source as reStructuredText: one line, its markup characters escaped."""
    text = " ".join(str(text).split())
    for char in "\\*`_|":
        text = text.replace(char, "\\" + char)
    return text or "(empty)"


def settings_rst() -> str:
    lines = [".. list-table::", "   :header-rows: 1", "   :widths: 18 14 68", "",
             "   * - setting", "     - default", "     - meaning"]
    for s in config.SETTINGS:
        default = f"``{s.default}``" if s.default else "(empty)"
        lines += [f"   * - ``{s.name}``", f"     - {default}",
                  f"     - {_cell(s.help)}", "",
                  f"       Environment ``{s.env}``; flag ``{s.flag} {s.metavar}``."]
    return "\n".join(lines) + "\n"


def _literal(text: str) -> list[str]:
    body = ("    " + line if line.strip() else "" for line in text.splitlines())
    return [".. code-block:: text", "", *body, ""]


def http_rst() -> str:
    source = importlib.resources.files("plant_store").joinpath("http").joinpath("openapi.json")
    doc: dict[str, Any] = json.loads(source.read_text("utf-8"))
    info = doc.get("info", {})
    out = [f"Generated from ``plant_store/http/openapi.json`` (OpenAPI {doc['openapi']}, "
           f"\"{info.get('title', '')}\" {info.get('version', '')}).", ""]
    for path, item in doc["paths"].items():
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            head = f"{method.upper()} {path}"
            out += [head, "-" * len(head), ""]
            if op.get("summary"):
                out += [_cell(op["summary"]) + ".", ""]
            if op.get("description"):
                out += [_cell(op["description"]), ""]
            security = op.get("security", doc.get("security"))
            out += ["No token." if security == [] else "Needs a bearer token.", ""]
            params = [*item.get("parameters", []), *op.get("parameters", [])]
            if params:
                out += ["Parameters:", ""]
                for p in params:
                    p = _resolve(doc, p)
                    out.append(f"- ``{p['name']}`` (in {p['in']}"
                               f"{', required' if p.get('required') else ''}): "
                               f"{_cell(p.get('description', ''))}")
                out.append("")
            if "requestBody" in op:
                body = _resolve(doc, op["requestBody"])
                types = ", ".join(f"``{t}``" for t in body.get("content", {}))
                out += [f"Request body: {types}. {_cell(body.get('description', ''))}", ""]
            out += [".. list-table::", "   :header-rows: 1", "   :widths: 12 88", "",
                    "   * - status", "     - answer"]
            for status, response in op.get("responses", {}).items():
                response = _resolve(doc, response)
                out += [f"   * - {status}", f"     - {_cell(response.get('description', ''))}"]
            out.append("")
    return "\n".join(out) + "\n"


def _resolve(doc: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        target = doc
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        node = target
    return node


@contextmanager
def _columns(width: int) -> Iterator[None]:
    """argparse reads the width from COLUMNS; set for the page, then as it was."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def cli_rst(parser: argparse.ArgumentParser) -> str:
    """``parser`` is the whole grammar (``plant_store.cli.program.parser()``), handed down: it
    is above this module."""
    with _columns(WIDTH):
        out = ["Generated from the parser in ``plant_store/cli/program.py``: what ``--help`` "
               "prints.", "", "plant-store", "-----------", "", *_literal(parser.format_help())]

        def walk(p: argparse.ArgumentParser, words: list[str]) -> None:
            for action in p._actions:
                choices = getattr(action, "choices", None)
                if not isinstance(choices, dict):
                    continue
                for name, sub in choices.items():
                    title = " ".join([*words, name])
                    out.extend([title, "-" * len(title), "", *_literal(sub.format_help())])
                    walk(sub, [*words, name])

        walk(parser, ["plant-store"])
    return "\n".join(out) + "\n"


def generated(parser: argparse.ArgumentParser) -> dict[str, Callable[[], str]]:
    """Each generated page by the name a page includes it by (``_generated/NAME``), the
    command line's from ``parser``."""
    return {"settings.rst": settings_rst, "http.rst": http_rst,
            "cli.rst": lambda: cli_rst(parser)}
