"""The suite does not depend on its surroundings (issue 46): with port 8080 taken (the
README's server left running) and the runner's SIGHUP and SIGINT ignored (nohup, a job in
a shell's background), the tests that failed so pass."""

import os
import signal
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a pytest run of its own, of real-server tests

TESTS = [
    "tests/integration/test_cli.py::test_unwritable_data_path_is_one_line",
    "tests/integration/test_filesystems.py::"
    "test_read_only_or_missing_data_directory_at_start_is_one_line",
    "tests/integration/test_serve.py::"
    "test_a_stop_signal_finishes_the_request_in_flight_then_exits_0",
    "tests/integration/test_webhook_retry.py::"
    "test_ctrl_c_while_waiting_withdraws_the_request_in_one_line",
]


def _as_nohup_in_the_background():
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_tests_pass_with_8080_taken_and_stop_signals_ignored_by_the_runner():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            taken.bind(("127.0.0.1", 8080))
            taken.listen()
        except OSError:
            pass  # something listens there already: the condition holds all the same
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
             "slow or not slow", *TESTS],
            cwd=root, capture_output=True, text=True, timeout=240,
            preexec_fn=_as_nohup_in_the_background)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "5 passed" in run.stdout
