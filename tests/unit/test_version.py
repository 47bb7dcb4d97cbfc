"""One version, everywhere (issue 46): the package's, CHANGELOG.rst's top section, the
OpenAPI document's ``info.version``; and a change of the document is a new version."""

import hashlib
import json
import pathlib
import re

from plant_store import __version__
from plant_store.http.operational import DOCUMENT
from plant_store.http.operational import READY_BODY as READY

ROOT = pathlib.Path(__file__).parents[2]
# The digest of each released interface (the document, info.version left out): a changed
# document under an unchanged version fails here. A release adds its line.
INTERFACES = {
    "1.1.0": "68e66cc9fd9b9a94b38ac25523e69f769e01bb2c01c06263bf25edeb36e3f53b",
    "1.2.0": "36a468d3447bdbb3493ce83cea0fed18a2e0e3b282068c841aa48036264291f1",
}


def _digest(document):
    info = {key: value for key, value in document["info"].items() if key != "version"}
    rest = {**document, "info": info}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, ensure_ascii=False).encode()
                          ).hexdigest()


def releases():
    """(version, date, commit or None) of each section of CHANGELOG.rst, newest first."""
    text = (ROOT / "CHANGELOG.rst").read_text()
    return re.findall(r"^(\d+\.\d+\.\d+) \((\d{4}-\d\d-\d\d)(?:, commit ([0-9a-f]{40}))?\)\n-+$",
                      text, re.MULTILINE)


def test_the_changelog_top_section_the_package_and_the_document_agree():
    text = (ROOT / "CHANGELOG.rst").read_text()
    assert "\nUnreleased\n" not in text, "release the Unreleased section: name its version"
    top = releases()[0]
    assert top[0] == __version__ == DOCUMENT["info"]["version"], (top, __version__)


def test_the_document_changes_only_with_its_version():
    assert DOCUMENT["info"]["version"] in INTERFACES, "a new version: add its digest"
    assert _digest(DOCUMENT) == INTERFACES[DOCUMENT["info"]["version"]], (
        "the OpenAPI document changed under the same info.version: a new operation is a "
        "minor version, a fix a patch; bump __version__, the document and the changelog, "
        "and add the new digest here")


def test_ready_names_the_release():
    assert json.loads(READY) == {"status": "ready", "version": __version__}


def test_every_release_before_this_one_names_its_commit():
    """The rolling-upgrade test starts "the previous release" from the commit its section
    names: a version, not a hash kept in a test."""
    older = releases()[1:]
    assert older and all(commit for _, _, commit in older), older
