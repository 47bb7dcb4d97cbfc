"""Every shell session in README.rst and the documentation pages runs, in order, against
real servers, and prints what the page shows (tests/sessions.py says which pages, in which
order, how sessions are read and what is normalized)."""

import os
import re
import sys

import pytest

import sessions
from serverproc import free_port

DATABASE_URL = "postgresql://plants@localhost/plants"  # the pages' database
BACKGROUND = re.compile(r"(?<!&)&(?!&)\s*(?:\w+=\$!)?\s*$")  # "cmd &", "cmd & PID=$!"


def _port_of(command, ports):
    """The port a backgrounded command listens on, for the next command to wait for."""
    if match := re.search(r"--port (\d+)|\bPORT=(\d+)", command):
        return int(match.group(1) or match.group(2))
    if "plant-store serve" in command:
        return ports[8080]
    if "receiver.py" in command:
        return ports[9000]
    return None


@pytest.fixture
def readme_database(request):
    """The pages' database, made as docs/postgresql.rst says, on the test cluster, when a
    page has that block."""
    if not any(b.text.startswith("CREATE ROLE") for b in sessions.page_blocks()):
        yield None
        return
    postgres = request.getfixturevalue("postgres")
    yield postgres
    with postgres.connect(autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS plants WITH (FORCE)")
        conn.execute("DROP ROLE IF EXISTS plants")


def test_every_readme_session_runs_and_prints_what_the_readme_shows(tmp_path,
                                                                     readme_database):
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / ".venv").symlink_to(sys.prefix)  # the README's virtual environment
    ports = {readme: free_port() for readme in sessions.README_PORTS}
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PLANT_STORE_", "PG", "VIRTUAL_ENV"))}
    venv_bin = os.path.join(sys.prefix, "bin")
    env.update(
        HOME=str(tmp_path), PYTHONUNBUFFERED="1", LC_ALL="C.UTF-8", COLUMNS="100",
        PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin),
        PLANT_STORE_PORT=str(ports[8080]),  # the README's default port, where serve listens
    )

    def localize(text):
        for readme, real in ports.items():
            text = re.sub(rf"\b{readme}\b", str(real), text)
        if readme_database is not None:
            text = text.replace(DATABASE_URL, readme_database.url("plants").replace(
                "postgres@", "plants@"))
        return text

    blocks = sessions.page_blocks()
    assert sum(len(b.steps) for b in blocks) > 20, "the pages' sessions were not found"
    shell = sessions.Shell(str(clone), env)
    try:
        for block in blocks:
            if block.save_as:
                (clone / block.save_as).write_text(localize(block.text) + "\n")
            elif block.text.startswith("CREATE ROLE") and readme_database is not None:
                with readme_database.connect(autocommit=True) as conn:
                    for statement in filter(str.strip, block.text.split(";")):
                        conn.execute(statement)
            for step in block.steps:
                command = localize(step.command)
                output, status = shell.run(command)
                if BACKGROUND.search(command) and (port := _port_of(command, ports)):
                    sessions.wait_for_port(port)
                actual = sessions.normalize(output.replace("\r", ""), ports, str(clone))
                actual = "\n".join(line.rstrip() for line in actual.rstrip("\n").split("\n"))
                actual = actual + "\n" if actual else ""
                assert sessions.matches(step.expected, actual), (
                    f"{step.page} line {step.line}: $ {step.command}\n"
                    f"--- the page shows:\n" + "\n".join(step.expected) +
                    f"\n--- it printed (exit status {status}):\n{actual}")
    finally:
        shell.close()


def test_every_page_with_a_session_is_run():
    """A page of docs/ that holds a session is in sessions.PAGES, so its session runs."""
    with_sessions = {str(path.relative_to(sessions.ROOT))
                     for path in [sessions.ROOT / "README.rst",
                                  *(sessions.ROOT / "docs").rglob("*.rst")]
                     if "_build" not in path.parts
                     and any(b.steps for b in sessions.literal_blocks(path.read_text("utf-8")))}
    assert with_sessions <= set(sessions.PAGES), sorted(with_sessions - set(sessions.PAGES))
    assert len(set(sessions.PAGES)) == len(sessions.PAGES)
