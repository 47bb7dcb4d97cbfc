"""A page of the documentation as ``plant-store docs PAGE`` prints it: the site's page for a
terminal. The page's reStructuredText is rendered as plain text, for the directives and
roles the pages use, and nothing is left for the reader to resolve:

- ``.. include:: _generated/NAME`` is the generated reference (settings, HTTP interface,
  command line), made by the functions that make the site's (``plant_store.cli.reference``);
- ``.. literalinclude::`` is the example file, which ships beside the pages, indented;
- ``.. code-block::`` and ``::`` blocks are indented text; ``.. list-table::`` is a list of
  rows; ``.. toctree::`` lists the pages with the command that prints each; ``.. contents::``
  and comments are dropped;
- ``:doc:`NAME``` is the page's title and the command that prints it; ``:class:`` and other roles
  their text; double-backquoted literals and links their words (a link's address after it);
- a file only a clone has (``shipped.CLONE_FOLDERS``, ``shipped.CLONE_FILES``) is marked
  "in a clone", with the command that prints it when there is one, unless its paragraph
  says so already.

A directive it does not know is left as written, so a test sees it. Markdown pages (the
contract and the seed) read as they are.
"""

import functools
import re
import textwrap
from collections.abc import Callable, Mapping

from plant_store.cli import shipped

# The generated pages by the name a page includes them by (``_generated/NAME``), each made
# when included: ``plant_store.cli.reference.generated(parser)``.
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
    """The page ``name`` (one of ``shipped.pages()``) as a terminal shows it; KeyError when
    there is none."""
    source = shipped.page(name)
    if shipped.is_markdown(name):
        return source
    return render(source, generated)


@functools.cache
def _titles() -> dict[str, str]:
    return shipped.pages()


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
        source = generated[made]() if made != arg else shipped.docs_file(arg)
        return [pad + part if part else "" for part in render(source, generated).split("\n")]
    if name == "literalinclude":
        return [pad + "    " + part if part.strip() else ""
                for part in shipped.docs_file(arg).rstrip("\n").split("\n")]
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
    if " " in words or not (words in shipped.CLONE_FILES
                            or (slash and top in shipped.CLONE_FOLDERS)):
        return ""
    command = {"conf": _conf_command, "docs": _docs_command}.get(top, _no_command)(rest)
    return f"in a clone; {command} prints it" if command else "in a clone of the repository"


def _no_command(name: str) -> str:
    return ""


def _conf_command(name: str) -> str:
    if name == "plant-store.ini":
        return "plant-store config example"
    examples = {file: example for example, file in shipped.EXAMPLES.items()}
    return f"plant-store config example {examples[name]}" if name in examples else ""


def _docs_command(name: str) -> str:
    stem, dot, suffix = name.rpartition(".")
    return f"plant-store docs {stem}" if dot and suffix in ("rst", "md") and \
        stem in _titles() else ""
