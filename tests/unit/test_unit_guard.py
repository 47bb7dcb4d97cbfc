"""tests/unit starts nothing: the guard (tests/support/plugins/unit_guard.py) is on for
every test here."""

import os
import socket
import subprocess

import pytest

from support.plugins.unit_guard import UNIT_TIMEOUT


def test_starting_a_process_fails_here():
    with pytest.raises(AssertionError, match="belongs in tests/integration"):
        subprocess.run(["true"])
    with pytest.raises(AssertionError, match="belongs in tests/integration"):
        os.fork()


def test_listening_on_a_socket_fails_here():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        with pytest.raises(AssertionError, match="belongs in tests/integration"):
            sock.listen()


def test_a_test_here_fails_after_the_whole_loops_bound(request):
    assert request.node.get_closest_marker("timeout").args == (UNIT_TIMEOUT,)
    assert UNIT_TIMEOUT <= 30
