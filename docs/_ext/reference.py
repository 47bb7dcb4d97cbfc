"""The generated reference pages: each is written from the real declaration at build time,
so none is a copy that can drift.

- ``settings.rst``: a table of ``plant_store.config.SETTINGS`` (name, default, environment
  variable, flag, help);
- ``http.rst``: every path and method of ``plant_store/http/openapi.json``, its parameters and
  each status it may answer;
- ``cli.rst``: the ``--help`` of ``plant-store`` and of every sub-command, from the parser
  in ``plant_store.cli.args``.
"""

import json
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
METHODS = ("get", "head", "post", "put", "patch", "delete", "options")


def version() -> str:
    import plant_store
    return plant_store.__version__


def _cell(text: str) -> str:
    """Prose from the source as reStructuredText: one line, its markup characters escaped."""
    text = " ".join(str(text).split())
    for char in "\\*`_|":
        text = text.replace(char, "\\" + char)
    return text or "(empty)"


def settings_rst() -> str:
    from plant_store import config
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
    doc = json.loads((ROOT / "plant_store" / "http" / "openapi.json").read_text("utf-8"))
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


def _resolve(doc: dict, node: dict) -> dict:
    while "$ref" in node:
        target = doc
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        node = target
    return node


def cli_rst() -> str:
    os.environ["COLUMNS"] = "88"  # argparse wraps to the terminal; the page has a width
    from plant_store.cli import args as cli_args
    parser = cli_args.parser()
    out = ["Generated from the parser in ``plant_store/cli/args.py``: what ``--help`` prints.",
           "", "plant-store", "-----------", "", *_literal(parser.format_help())]

    def walk(p, words):
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


def write_all(folder: pathlib.Path) -> None:
    folder.mkdir(exist_ok=True)
    for name, make in (("settings.rst", settings_rst), ("http.rst", http_rst),
                       ("cli.rst", cli_rst)):
        text = make()
        path = folder / name
        if not path.exists() or path.read_text("utf-8") != text:  # keep mtimes for rebuilds
            path.write_text(text, "utf-8")
