"""CHANGELOG.rst matches the commits it names (issue 50, item 2): each release's commit
holds that version in ``plant_store/__init__.py`` and was made on the date its section
says, its annotated tag ``vX.Y.Z`` points there, and no section lists what an older
release's commit already listed (the 1.1.0 section had about 20 bullets that the 1.0.0
commit's changelog already had, under "Unreleased").

It reads the history with git (here, not in tests/unit, which starts no process). Only a
tree without ``.git`` (an unpacked sdist, an installed wheel) skips it: a clone that lacks a
named commit fails, as the rolling-upgrade test would. Tags travel only when asked for
(``git clone`` takes them, ``git fetch`` of a branch may not, a CI checkout often has none):
a clone with no tag at all checks everything but the tags; a clone with tags must have each
release's, pointing at its commit.
"""

import datetime
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).parents[2]
pytestmark = pytest.mark.skipif(not (ROOT / ".git").exists(),
                                reason="no git history here (an sdist or a wheel)")
SECTION = re.compile(r"^(\d+\.\d+\.\d+) \((\d{4}-\d\d-\d\d)(?:, commit ([0-9a-f]{40}))?\)\n-+\n",
                     re.MULTILINE)
VERSION = re.compile(r'^__version__ = "([^"]+)"$', re.MULTILINE)
WORDS = 10  # a bullet is known by its first words, whatever its lines' wrapping


def git(*args):
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def sections(text):
    """(version, date, commit or "", its bullets' first words) of each release, newest
    first."""
    found = []
    heads = list(SECTION.finditer(text))
    for head, after in zip(heads, [*heads[1:], None], strict=True):
        body = text[head.end():after.start() if after else len(text)]
        bullets = re.findall(r"^- (.*(?:\n  .*)*)", body, re.MULTILINE)
        found.append((*head.groups(default=""),
                      [" ".join(bullet.split()[:WORDS]) for bullet in bullets]))
    return found


def words(text):
    return " ".join(text.split())


RELEASES = sections((ROOT / "CHANGELOG.rst").read_text())


def test_the_changelog_has_its_releases():
    assert [version for version, *_ in RELEASES][-2:] == ["1.1.0", "1.0.0"], RELEASES
    assert all(bullets for *_, bullets in RELEASES[:-1]), "a release lists what it changed"


def test_each_named_commit_is_its_release_and_its_tag_points_there():
    tagged = git("tag", "--list", "v*").split()
    for version, date, commit, _ in RELEASES:
        if not commit:  # the release being made: its commit is not yet
            assert (version, date, commit) == RELEASES[0][:3], "only the top one is unnamed"
            continue
        assert VERSION.findall(git("show", f"{commit}:plant_store/__init__.py")) == [version]
        made = datetime.datetime.fromisoformat(git("show", "-s", "--format=%cI", commit).strip())
        assert made.astimezone(datetime.timezone.utc).date().isoformat() == date, (
            version, made)
        if not tagged:
            continue  # a clone without tags (see the docstring): nothing to compare
        tag = f"v{version}"
        assert tag in tagged, f"{tag} is missing: git tag -a {tag} {commit}"
        assert git("cat-file", "-t", tag).strip() == "tag", f"{tag} is not annotated"
        assert git("rev-parse", f"{tag}^{{commit}}").strip() == commit, tag


def test_no_release_lists_what_an_older_release_already_had():
    """Each bullet is under the release whose commit first has it: none is already in the
    changelog of an older release's commit (whatever section it stood in there)."""
    for n, (version, _, _, bullets) in enumerate(RELEASES):
        for older, _, commit, _ in RELEASES[n + 1:]:
            then = words(git("show", f"{commit}:CHANGELOG.rst"))
            already = [bullet for bullet in bullets if bullet in then]
            assert not already, f"{version} lists what {older}'s commit had: {already}"
