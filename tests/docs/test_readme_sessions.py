"""Every shell session in README.rst and the documentation pages runs, in order, against
real servers, and prints what the page shows (tests/support/sessions.py says which pages, in which
order, how sessions are read and what is normalized)."""

import os
import re
import shlex
import signal
import socket
import subprocess
import sys

import pytest

from support import sessions
from support.servers import free_port

DATABASE_URL = "postgresql://plants@localhost/plants"  # the pages' database
BACKGROUND = re.compile(r"(?<!&)&(?!&)\s*(?:\w+=\$!)?\s*$")  # "cmd &", "cmd & PID=$!"
# README.rst's install command: its last part leaves the server in the foreground of the
# reader's first terminal, where the tutorial has them stop it with Ctrl-C.
INSTALL = re.compile(r"python3 -m venv \.venv && \.venv/bin/pip install '\.\[docs-page\]' "
                     r"&& (\.venv/bin/plant-store serve)")

MASKED = re.compile(r"\b(?:export|local|declare|readonly)\s+\w+=[\"']?\$\(")


def failure_shown(expected):
    """A command may exit non-zero only where the page shows what went wrong: a failure
    that prints nothing (a command inside ``$(...)``, its error sent elsewhere) fails."""
    return any(re.search(r"error|refused|denied|not found|no such", line, re.IGNORECASE)
               for line in expected)


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
    install = [m for b in blocks if b.page == "README.rst" and (m := INSTALL.fullmatch(b.text))]
    assert len(install) == 1, "README.rst's install command was not found"
    shell = sessions.Shell(str(clone), env)
    first_terminal = None
    try:
        page = None
        for block in blocks:
            if page == "docs/tutorial.rst" != block.page:
                _tutorial_left_nothing_running(shell, ports)
            page = block.page
            if block.page == "README.rst" and INSTALL.fullmatch(block.text):
                # The install itself is the venv this suite runs in (tests/packaging/
                # test_wheel_install.py installs the wheel); the serve it ends with runs in
                # the reader's first terminal, as the README's first request expects.
                first_terminal = subprocess.Popen(
                    shlex.split(install[0].group(1)), cwd=clone, env=env,
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                    start_new_session=True)
                sessions.wait_for_port(ports[8080])
            if block.page == "docs/tutorial.rst" and first_terminal is not None:
                # The tutorial's first instruction: Ctrl-C in that terminal.
                os.killpg(first_terminal.pid, signal.SIGINT)
                _, log = first_terminal.communicate(timeout=30)
                assert first_terminal.returncode == 0, log
                first_terminal = None
            if block.save_as:
                (clone / block.save_as).write_text(localize(block.text) + "\n")
            elif block.text.startswith("CREATE ROLE") and readme_database is not None:
                with readme_database.connect(autocommit=True) as conn:
                    for statement in filter(str.strip, block.text.split(";")):
                        conn.execute(statement)
            for step in block.steps:
                # "export X=$(cmd)" exits 0 whatever cmd did: a failure there would pass
                assert not MASKED.search(step.command), (  # unnoticed, by reader and test
                    f"{step.page} line {step.line}: {step.command}: assign, then export")
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
                assert status == 0 or failure_shown(step.expected), (
                    f"{step.page} line {step.line}: $ {step.command}\nexit status {status}, "
                    f"and the page shows no failure:\n{actual}")
    finally:
        if first_terminal is not None:
            os.killpg(first_terminal.pid, signal.SIGKILL)
            first_terminal.communicate()
        shell.close()


def _tutorial_left_nothing_running(shell, ports):
    """Issue 46: the tutorial left its webhook receiver running, and its secret exported
    into the next page's session."""
    output, _ = shell.run('echo "secret: ${PLANT_STORE_WEBHOOK_SECRET:-unset}"')
    assert output.strip() == "secret: unset", output
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", ports[9000])) != 0, "the receiver still runs"


def test_every_page_with_a_session_is_run():
    """A page of docs/ that holds a session is in sessions.PAGES, so its session runs."""
    with_sessions = {str(path.relative_to(sessions.ROOT))
                     for path in [sessions.ROOT / "README.rst",
                                  *(sessions.ROOT / "docs").rglob("*.rst")]
                     if "_build" not in path.parts
                     and any(b.steps for b in sessions.literal_blocks(path.read_text("utf-8")))}
    assert with_sessions <= set(sessions.PAGES), sorted(with_sessions - set(sessions.PAGES))
    assert len(set(sessions.PAGES)) == len(sessions.PAGES)
