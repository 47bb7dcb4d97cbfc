"""A log reader that stalls (issue 42, finding 5): ``plant-store serve`` whose stderr is a
pipe nobody reads keeps serving in bounded memory, and stops in time when told to."""

import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from plant_store.serving.server import STOP_GRACE
from support.servers import free_port, wait_answering

REQUEST = b"GET /plants HTTP/1.1\r\nHost: test\r\n\r\n"  # no token: 401, an access line
ANSWER = b"HTTP/1.1 401 "
N = 15_000  # requests: far more access lines than the pipe and the log's queue hold


def refused(port, count, connections=4, pipelined=100):
    """``count`` requests without a token over keep-alive connections, ``pipelined`` at a
    time on each; returns once every one is answered 401."""
    errors = []

    def connection(share):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                while share:
                    batch = min(share, pipelined)
                    sock.sendall(REQUEST * batch)
                    seen, tail = 0, b""
                    while seen < batch:
                        data = sock.recv(1 << 16)
                        assert data, "the server closed the connection"
                        seen += (tail + data).count(ANSWER)
                        tail = data[-len(ANSWER):]
                    share -= batch
        except Exception as exc:  # told in the test's own thread, below
            errors.append(exc)

    threads = [threading.Thread(target=connection, args=(count // connections,))
               for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors


def rss(pid):
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))


@pytest.mark.slow
def test_a_stderr_nobody_reads_bounds_memory_and_lets_the_server_stop(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "plant_store", "serve", "--port", str(port), "--data-dir",
         str(tmp_path / "data"), "--no-first-token"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # never read
    try:
        wait_answering(port, proc)
        refused(port, N)
        after_n = rss(proc.pid)
        refused(port, 3 * N)
        grown = rss(proc.pid) - after_n
        # Unbounded, each access line kept about 390 bytes: 17 MB for these 45,000.
        assert grown < 3 * N * 100, f"grew {grown / 1e6:.1f} MB over {3 * N} requests"

        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE + 3)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {STOP_GRACE + 3:g} s after SIGTERM")
        assert proc.returncode == 0
        assert time.monotonic() - began < STOP_GRACE + 3
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
