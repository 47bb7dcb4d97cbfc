"""tests/unit starts nothing: the guard (tests/support/plugins/unit_guard.py) is on for
every test here."""

import os
import socket
import subprocess

import pytest


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
