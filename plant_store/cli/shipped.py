"""The documentation's pages and the example configurations, as a pip user has them.

A wheel carries them (``setup.py`` copies ``docs/`` and ``conf/`` into the package as it
builds: ``plant_store/shipped/``); a clone, or an editable install, reads the same files
where they live. ``plant-store docs PAGE`` prints a page, ``plant-store config example
NAME`` an example, so every page a help text or an error names opens without the clone.
"""

import importlib.resources
import pathlib
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
