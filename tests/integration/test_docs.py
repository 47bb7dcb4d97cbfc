"""The repository carries its own interface: README.rst's links resolve inside the clone,
and nothing points outside it (the spec it was built from lives in docs/)."""

import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_readme_links_to_the_interface_in_the_repository():
    readme = (ROOT / "README.rst").read_text()
    links = re.findall(r"<(docs/[^>]+)>`_", readme)
    assert {"docs/seed-plant-store.md", "docs/CONTRACT.md"} <= set(links)
    for link in links:
        assert (ROOT / link).is_file(), link
    assert "## POST /plants" in (ROOT / "docs/CONTRACT.md").read_text()


def test_no_tracked_file_points_outside_the_clone():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert tracked, "not a git clone"
    outside = [name for name in tracked if not name.endswith(".png")
               and "../shared" in (ROOT / name).read_text(errors="replace")
               and name != "tests/integration/test_docs.py"]
    assert outside == []


def test_the_readmes_first_request_is_the_tutorials_tested_one():
    """README.rst's first request is not run itself; each of its commands is one that the
    tutorial's sessions run (tests/integration/test_readme_sessions.py), the venv's path aside."""
    import sessions

    def commands(text):
        return [" ".join(line.replace("\\\n", " ").split()) for line in text]

    readme = (ROOT / "README.rst").read_text()
    block = re.search(r"then list the plants::\n\n(.*?)\n\n", readme, re.DOTALL).group(1)
    shown = commands(re.split(r"\n(?=    \S)", block.replace(".venv/bin/", "")))
    tested = commands(step.command for block in sessions.page_blocks(("docs/tutorial.rst",))
                      for step in block.steps)
    assert len(shown) == 3
    assert [command for command in shown if command not in tested] == []
