"""tests/unit starts nothing: no process, fork, listening socket, database or browser
(anywhere with ``PLANT_STORE_UNIT_GUARD`` set), and no test there takes more than the whole
of tests/unit may (UNIT_TIMEOUT)."""

import os
import socket
import subprocess

import pytest

from support.paths import UNIT

REAL_THINGS = {"postgres", "database_url", "browser"}
# tests/unit is the loop run after every edit, under 30 s on 2 cores (issue 51): a test
# there that takes longer alone fails (pytest-timeout), instead of setup.cfg's 300 s.
UNIT_TIMEOUT = 30


def pytest_collection_modifyitems(items):
    for item in items:
        if UNIT in item.path.parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """tests/unit runs in process, the loop run after every edit: a test there that starts
    a process, forks, listens on a socket or asks for a database or browser fails (in its
    fixtures too, whatever their scope), and belongs in tests/integration."""
    if UNIT not in item.path.parents and not os.environ.get("PLANT_STORE_UNIT_GUARD"):
        yield
        return
    patched = [(subprocess.Popen, "__init__"), (os, "fork"), (socket.socket, "listen")]
    saved = [getattr(owner, name) for owner, name in patched]

    def refuse(*args, **kwargs):
        raise AssertionError("tests/unit starts no process and no server: this test "
                             "belongs in tests/integration")

    for owner, name in patched:
        setattr(owner, name, refuse)
    try:
        yield
    finally:
        for (owner, name), value in zip(patched, saved, strict=True):
            setattr(owner, name, value)


def pytest_runtest_setup(item):
    """Before any fixture: a test in tests/unit that asks for a database or a browser."""
    needs = REAL_THINGS & set(getattr(item, "fixturenames", ()))
    if needs and (UNIT in item.path.parents or os.environ.get("PLANT_STORE_UNIT_GUARD")):
        pytest.fail(f"tests/unit starts nothing; this test asks for {sorted(needs)}: it "
                    "belongs in tests/integration")

