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


def test_the_readmes_first_request_is_a_session_run_right_before_the_tutorial():
    """README.rst's first request runs itself (tests/integration/test_readme_sessions.py), and the
    tutorial's sessions run next, in the same shell: the tutorial starts from what the
    README left (its server stopped, its token in $TOKEN, plant 1 stored)."""
    from support import sessions

    readme = sessions.page_blocks(("README.rst",))
    [first] = [b for b in readme if b.intro.endswith("then list the plants::")]
    assert [s.command.split()[0] for s in first.steps] == [
        "TOKEN=$(.venv/bin/plant-store", "curl", "curl"]
    assert sessions.PAGES[:2] == ("README.rst", "docs/tutorial.rst")
    assert first is [b for b in readme if b.steps][-1]  # nothing of the README's after it
