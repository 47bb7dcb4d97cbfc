"""Sphinx settings for Plant Store's documentation site.

The reference pages that describe the real thing are generated here, at build time, into
``_generated/`` (never committed): the settings from ``plant_store.config.SETTINGS``, the HTTP
interface from ``plant_store/http/openapi.json``, the command line from the argparse parser in
``plant_store.cli.program``, by the functions of ``plant_store/cli/docs.py`` that
``plant-store docs`` renders them with. Nothing is fetched from the network: no intersphinx,
no remote images.
"""

import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # plant_store, from this clone
sys.path.insert(0, str(HERE / "_ext"))

import reference  # noqa: E402  (docs/_ext/reference.py, after the path is set)

project = "Plant Store"
author = "Plant Store's authors"
copyright = "Plant Store's authors"
release = version = reference.version()

extensions = ["myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "_generated", "examples", "Thumbs.db", ".DS_Store"]
myst_heading_anchors = 3

# Literal blocks are sessions, settings and configuration files, not Python: shown as
# written unless a block names its language.
highlight_language = "none"

html_theme = "furo"
html_title = "Plant Store"
html_static_path: list[str] = []

reference.write_all(HERE / "_generated")
