"""The documentation's pages and the example configurations as a pip user has them, and
each page as ``plant-store docs PAGE`` prints it.

A wheel carries them (``setup.py`` copies ``docs/`` and ``conf/`` into the package as it
builds: ``plant_store/shipped/``); a clone, or an editable install, reads the same files
where they live. ``plant-store docs PAGE`` prints a page, ``plant-store config example
NAME`` an example, so every page a help text or an error names opens without the clone.

A page as ``plant-store docs PAGE`` prints it (:func:`text`) is the site's page for a
terminal: its reStructuredText is rendered as plain text, for the directives and
roles the pages use, and nothing is left for the reader to resolve:

- ``.. include:: _generated/NAME`` is the generated reference (settings, HTTP interface,
  command line), made by the functions that make the site's (:mod:`plant_store.cli.docs`);
- ``.. literalinclude::`` is the example file, which ships beside the pages, indented;
- ``.. code-block::`` and ``::`` blocks are indented text; ``.. list-table::`` is a list of
  rows; ``.. toctree::`` lists the pages with the command that prints each; ``.. contents::``
  and comments are dropped;
- ``:doc:`NAME``` is the page's title and the command that prints it; ``:class:`` and other roles
  their text; double-backquoted literals and links their words (a link's address after it);
- a file only a clone has (:data:`CLONE_FOLDERS`, :data:`CLONE_FILES`) is marked
  "in a clone", with the command that prints it when there is one, unless its paragraph
  says so already.

A directive it does not know is left as written, so a test sees it. Markdown pages (the
contract and the seed) read as they are.
"""

import functools
import importlib.resources
import pathlib
import re
import textwrap
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importlib.resources.abc from 3.11 on; importlib.abc's is deprecated
    from importlib.abc import Traversable

_SHIPPED = importlib.resources.files("plant_store").joinpath("shipped")
_CLONE = pathlib.Path(__file__).resolve().parents[2]
# An example's name for ``config example NAME``: its file in conf/.
EXAMPLES = {
    "nginx": "nginx.conf.example",
    "apache": "apache-plant-store.conf.example",
    "caddy": "Caddyfile.example",
    "caddy-strip-prefix": "Caddyfile-strip-prefix.example",
    "haproxy": "haproxy.cfg.example",
    "systemd": "plant-store.service.example",
    "systemd-gunicorn": "plant-store-gunicorn.service.example",
}
# What a clone has and the wheel does not, at the clone's top level: a page that names one of
# these says where it is (``plant-store docs`` marks it "in a clone").
CLONE_FOLDERS = (".ci", "bench", "conf", "docs", "tests")
CLONE_FILES = ("README.rst", "CHANGELOG.rst", "Containerfile", ".containerignore", ".gitignore",
               "setup.py",
               "setup.cfg", "MANIFEST.in", "pyproject.toml", "ruff.toml")


def _folder(name: str) -> "Traversable":
    """The wheel's copy of ``name`` (docs or conf), else the clone's."""
    shipped = _SHIPPED.joinpath(name)
    return shipped if shipped.is_dir() else _CLONE / name


def pages() -> dict[str, str]:
    """Every page by name (its file without the suffix), with its title."""
    found = {}
    for entry in _folder("docs").iterdir():
        stem, _, suffix = entry.name.rpartition(".")
        if suffix in ("rst", "md") and entry.is_file():
            found[stem] = _title(entry.read_text("utf-8"))
    return dict(sorted(found.items()))


def page(name: str) -> str:
    """The source of the page ``name``, one of :func:`pages`; KeyError when there is none.

    ``name`` is matched against the names of the files in the docs folder, never joined
    onto its path: a path (``../x``, ``/etc/x``) names no page, so only a page that ships
    is ever read."""
    return _page_file(name).read_text("utf-8")


def is_markdown(name: str) -> bool:
    """Whether the page ``name`` is Markdown (the contract and the seed), not RST."""
    return _page_file(name).name.endswith(".md")


def _page_file(name: str) -> "Traversable":
    for entry in _folder("docs").iterdir():
        if entry.name in (f"{name}.rst", f"{name}.md") and entry.is_file():
            return entry
    raise KeyError(name)


def docs_file(relative: str) -> str:
    """A file a page includes (``examples/host_app.py``), by its path from the docs folder,
    as the page names it; the wheel carries the examples beside the pages."""
    found = _folder("docs")
    for part in relative.split("/"):
        if part in ("", ".", ".."):
            raise KeyError(relative)
        found = found.joinpath(part)
    text: str = found.read_text("utf-8")
    return text


def example(name: str) -> str:
    """The example configuration ``name`` (of :data:`EXAMPLES`)."""
    text: str = _folder("conf").joinpath(EXAMPLES[name]).read_text("utf-8")
    return text


def _title(text: str) -> str:
    """A page's first heading: an RST title (underlined) or a Markdown '# ' line."""
    lines = text.splitlines()
    for at, line in enumerate(lines):
        if line.startswith("# "):
            return line[2:].strip()
        if (at + 1 < len(lines) and line.strip() and lines[at + 1].strip()
                and set(lines[at + 1].strip()) <= set("=-~#*") and not line.startswith("..")):
            return line.strip()
    return ""


# The generated pages by the name a page includes them by (``_generated/NAME``), each made
# when included: ``plant_store.cli.docs.generated(parser)``.
Generated = Mapping[str, Callable[[], str]]

WIDTH = 88
DIRECTIVE = re.compile(r"^(?P<indent> *)\.\. (?P<name>[\w-]+)::(?: +(?P<arg>.*))?$")
COMMENT = re.compile(r"^ *\.\.(?: |$)")  # a target (.. _name:) or a comment
LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
ROLE = re.compile(r":(?P<role>[\w-]+):`(?P<text>[^`]+)`")
LINK = re.compile(r"`(?P<text>[^`<]*?)\s*(?:<(?P<target>[^`>]+)>)?`__?(?!\w)")
SAYS_CLONE = re.compile(r"\b(?:in|of|at)\s+(?:a|the)\s+clone\b|\bthe\s+clone's\b",
                        re.IGNORECASE)
ESCAPED = re.compile(r"\\(.)")
ITEM = re.compile(r"^ *(?:[-*+] |\d+\. |#\. )")


def text(name: str, generated: Generated) -> str:
    """The page ``name`` (one of ``pages()``) as a terminal shows it; KeyError when
    there is none."""
    source = page(name)
    if is_markdown(name):
        return source
    return render(source, generated)


@functools.cache
def _titles() -> dict[str, str]:
    return pages()


def render(source: str, generated: Generated) -> str:
    """reStructuredText, as the pages use it, as plain text."""
    return "\n".join(_blocks(source.splitlines(), generated)).rstrip("\n") + "\n"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _body(lines: list[str], at: int, indent: int) -> tuple[list[str], int]:
    """The lines from ``at`` indented deeper than ``indent`` (blank ones among them), and
    where the first line after them is; blank lines at the end are left to the caller."""
    end = at
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
        end += 1
    while end > at and not lines[end - 1].strip():
        end -= 1
    return lines[at:end], end


def _blocks(lines: list[str], generated: Generated) -> list[str]:
    out: list[str] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            out.extend(_refill(_inline("\n".join(paragraph)).split("\n")))
            paragraph.clear()

    at = 0
    while at < len(lines):
        line = lines[at]
        directive = DIRECTIVE.match(line)
        if directive or COMMENT.match(line):
            flush()
            indent = _indent(line)
            body, at = _body(lines, at + 1, indent)
            if directive:
                out.extend(_directive(directive["name"], (directive["arg"] or "").strip(),
                                      body, indent, line, generated))
            continue
        at += 1
        if not line.strip():
            flush()
            if out and out[-1]:  # one blank line, where a dropped directive leaves more
                out.append("")
            continue
        if not line.rstrip().endswith("::"):
            paragraph.append(line)
            continue
        # A literal block follows: "text::" reads "text:", a lone "::" nothing.
        stripped = line.rstrip()
        if stripped.strip() != "::":
            paragraph.append(stripped[:-3] if stripped.endswith(" ::") else stripped[:-1])
        flush()
        body, at = _body(lines, at, _indent(line))
        out.extend(body)
    flush()
    return out


def _refill(lines: list[str]) -> list[str]:
    """A paragraph, or each item of a list, that rendering made wider than the page, wrapped
    again; lines laid out otherwise (a line block, a heading) are left as they are."""
    if all(len(line) <= WIDTH for line in lines) or lines[0].lstrip().startswith("|"):
        return lines
    groups: list[list[str]] = []
    for line in lines:
        if not groups or (ITEM.match(line) and _indent(line) == _indent(lines[0])):
            groups.append([line])
        else:
            groups[-1].append(line)
    out: list[str] = []
    for group in groups:
        item = ITEM.match(group[0])
        first = item[0] if item else " " * _indent(group[0])
        rest = " " * len(first)
        if any(_indent(line) != len(rest) for line in group[1:]):
            out += group
            continue
        words = " ".join(line.strip() for line in group)[len(first.strip()):].strip()
        out += textwrap.wrap(words, WIDTH, initial_indent=first, subsequent_indent=rest,
                             break_on_hyphens=False, break_long_words=False)
    return out


def _options(body: list[str]) -> tuple[dict[str, str], list[str]]:
    """A directive's options (``:name: value`` lines first) and its content, dedented."""
    content = textwrap.dedent("\n".join(body)).split("\n") if body else []
    options: dict[str, str] = {}
    while content and content[0].startswith(":"):
        name, _, value = content.pop(0)[1:].partition(":")
        options[name] = value.strip()
    while content and not content[0].strip():
        content.pop(0)
    return options, content


def _directive(name: str, arg: str, body: list[str], indent: int, line: str,
               generated: Generated) -> list[str]:
    pad = " " * indent
    options, content = _options(body)
    if name == "include":
        made = arg.removeprefix("_generated/")
        source = generated[made]() if made != arg else docs_file(arg)
        return [pad + part if part else "" for part in render(source, generated).split("\n")]
    if name == "literalinclude":
        return [pad + "    " + part if part.strip() else ""
                for part in docs_file(arg).rstrip("\n").split("\n")]
    if name in ("code-block", "code", "sourcecode"):
        return [pad + "    " + part if part.strip() else "" for part in content]
    if name == "list-table":
        return [pad + part if part else "" for part in _table(options, content, indent)]
    if name == "toctree":
        titles = _titles()
        caption = [options["caption"] + ":", ""] if "caption" in options else []
        return [pad + part if part else "" for part in caption + [
            f"- {titles.get(entry.strip(), entry.strip())}: plant-store docs {entry.strip()}"
            for entry in content if entry.strip()]]
    if name == "contents":
        return []
    return [line, *body]  # not rendered: left as written, for a test to find


def _table(options: dict[str, str], content: list[str], indent: int) -> list[str]:
    """A list-table as a list: each row's first cell, then its other cells below it (named
    by their column when there are more than two)."""
    rows: list[list[list[str]]] = []
    for line in content:
        if line.startswith("* - "):
            rows.append([[line[4:]]])
        elif line.startswith("  - ") and rows:
            rows[-1].append([line[4:]])
        elif rows:
            rows[-1][-1].append(line[4:] if line.startswith("    ") else line.strip())
    cells = [["\n".join(cell).strip() for cell in row] for row in rows]
    headers = cells.pop(0) if options.get("header-rows") == "1" and cells else []
    width = WIDTH - indent
    out: list[str] = []
    for row in cells:
        out += _wrap(row[0], width, "- ", "  ")
        for column, cell in enumerate(row[1:], start=1):
            label = (_inline(headers[column]) + ": " if len(row) > 2 and column < len(headers)
                     else "")
            out += _wrap(cell, width, "    " + label, "    ")
        out.append("")
    return out


def _wrap(cell: str, width: int, first: str, rest: str) -> list[str]:
    """A cell's paragraphs, rendered and wrapped, the first behind ``first``."""
    out: list[str] = []
    for number, paragraph in enumerate(re.split(r"\n\s*\n", cell)):
        if number:
            out.append("")
        out += textwrap.wrap(_inline(paragraph), width, initial_indent=first if not number
                             else rest, subsequent_indent=rest, break_on_hyphens=False,
                             break_long_words=False) or [first.rstrip()]
    return out


def _inline(paragraph: str) -> str:
    """One paragraph's inline markup as words: literals, roles, links, escapes. The first
    file only a clone has is marked so, when the paragraph does not say it already."""
    says_clone = bool(SAYS_CLONE.search(paragraph))
    out: list[str] = []
    # Odd parts are the literals' text, even parts the prose between them.
    for at, part in enumerate(LITERAL.split(paragraph)):
        if at % 2 == 0:
            out.append(_prose(part))
            continue
        where = "" if says_clone else _where(part)
        says_clone = says_clone or bool(where)
        out.append(f"{part} ({where})" if where else part)
    return "".join(out)


def _prose(text: str) -> str:
    text = ROLE.sub(_role, text)
    text = LINK.sub(_link, text)
    return ESCAPED.sub(r"\1", text)


def _role(match: re.Match[str]) -> str:
    role, words = match["role"], match["text"]
    target = re.fullmatch(r"(?s)(.*?)\s*<([^>]+)>", words)
    label, name = (target[1], target[2]) if target else ("", words)
    if role == "doc":
        title = label or _titles().get(name, name)
        return f"{title} (plant-store docs {name})"
    if label:
        return label
    return name.rpartition(".")[2] if name.startswith("~") else name


def _link(match: re.Match[str]) -> str:
    words, target = match["text"], match["target"]
    if target and words:
        return f"{words} ({target})"
    return words or target or ""


def _where(words: str) -> str:
    top, slash, rest = words.partition("/")
    if " " in words or not (words in CLONE_FILES
                            or (slash and top in CLONE_FOLDERS)):
        return ""
    command = {"conf": _conf_command, "docs": _docs_command}.get(top, _no_command)(rest)
    return f"in a clone; {command} prints it" if command else "in a clone of the repository"


def _no_command(name: str) -> str:
    return ""


def _conf_command(name: str) -> str:
    if name == "plant-store.ini":
        return "plant-store config example"
    examples = {file: example for example, file in EXAMPLES.items()}
    return f"plant-store config example {examples[name]}" if name in examples else ""


def _docs_command(name: str) -> str:
    stem, dot, suffix = name.rpartition(".")
    return f"plant-store docs {stem}" if dot and suffix in ("rst", "md") and \
        stem in _titles() else ""
