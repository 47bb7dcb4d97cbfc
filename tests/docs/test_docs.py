"""The repository carries its own interface: README.rst's links resolve inside the clone,
and nothing points outside it (the spec it was built from lives in docs/)."""

import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_readme_names_the_interface_that_the_repository_and_the_wheel_carry():
    """The README names pages by the command that prints them (issue 46: relative links
    break where PyPI shows it), and each page it names is in docs/ (the wheel's copy)."""
    readme = (ROOT / "README.rst").read_text()
    assert re.findall(r"<(docs/[^>]+)>`_", readme) == []  # no relative links
    named = set(re.findall(r"``plant-store docs ([\w-]+)``", readme)) - {"PAGE"}
    assert {"seed-plant-store", "CONTRACT", "tutorial"} <= named, named
    listed = {"deploying", "tls", "proxies", "postgresql", "processes", "settings", "errors",
              "durability", "architecture"}  # from its list of pages
    assert all(f"``{name}``" in readme for name in listed)
    for name in named | listed:
        assert any((ROOT / "docs" / f"{name}.{suffix}").is_file() for suffix in ("rst", "md")), name
    assert "## POST /plants" in (ROOT / "docs/CONTRACT.md").read_text()


def test_no_tracked_file_points_outside_the_clone():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert tracked, "not a git clone"
    outside = [name for name in tracked if not name.endswith(".png")
               and "../shared" in (ROOT / name).read_text(errors="replace")
               and name != "tests/docs/test_docs.py"]
    assert outside == []


def test_the_readmes_first_request_is_a_session_run_right_before_the_tutorial():
    """README.rst's first request runs itself (tests/docs/test_readme_sessions.py), and the
    tutorial's sessions run next, in the same shell: the tutorial starts from what the
    README left (its server stopped, its token in $TOKEN, plant 1 stored)."""
    from support import sessions

    readme = sessions.page_blocks(("README.rst",))
    [first] = [b for b in readme if b.intro.endswith("then list the plants::")]
    assert [s.command.split()[0] for s in first.steps] == [
        "TOKEN=$(.venv/bin/plant-store", "curl", "curl"]
    assert sessions.PAGES[:2] == ("README.rst", "docs/tutorial.rst")
    assert first is [b for b in readme if b.steps][-1]  # nothing of the README's after it
