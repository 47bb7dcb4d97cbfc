"""The previous release, to upgrade from: the newest section of CHANGELOG.rst below the
one being made names its commit (tests/packaging/test_changelog_commits.py holds the
sections to their commits), and :func:`previous_release` unpacks that commit's tree."""

import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).parents[2]
PREVIOUS_RELEASE = re.findall(
    r"^\d+\.\d+\.\d+ \(\d{4}-\d\d-\d\d, commit ([0-9a-f]{40})\)$",
    (ROOT / "CHANGELOG.rst").read_text(), re.MULTILINE)[0]


def previous_release(tmp_path):
    """The previous release's tree, unpacked under ``tmp_path``: run it with ``cwd`` there
    (``python -m plant_store`` imports the package found there first) and ``PYTHONPATH``.
    Skipped when the clone lacks the commit (an sdist), failed so under CI."""
    tree = tmp_path / "previous"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", PREVIOUS_RELEASE],
                             capture_output=True)
    if archive.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"the previous release's commit is not in this clone: "
                        f"{archive.stderr.decode()}")
        pytest.skip("the previous release's commit is not in this clone")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree
