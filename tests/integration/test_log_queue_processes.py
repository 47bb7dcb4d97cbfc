"""The log queue of several processes sharing one stderr (the workers of a pre-fork server):
each one's lines arrive whole, however the reader stalls."""

import os
import re
import signal
import time

from plant_store.logs import FORMAT, LineQueue, TextFormatter

WORKERS, FLUSHES, LINES = 4, 10, 200


def test_processes_sharing_a_stalled_pipe_tear_no_line():
    """Once a stalled reader comes back, each worker's lines arrive whole: one write of all
    that waited, past PIPE_BUF, was interleaved with the others' (the hostile pass on issue
    52 found torn lines under gunicorn with two workers; this set-up tore 90 of 8,000)."""
    r, w = os.pipe()
    children = []
    for n in range(WORKERS):
        pid = os.fork()
        if pid == 0:  # a worker: its own queue, as a forked worker has
            try:
                os.close(r)
                queue = LineQueue(w, TextFormatter(FORMAT), limit=1 << 24)
                for flush in range(FLUSHES):  # as the access log writes: a flush's lines
                    queue.write("".join(f"worker {n} line {i} " + "x" * (i % 150) + "\n"
                                        for i in range(flush * LINES, (flush + 1) * LINES)))
                queue.drain(20)
            finally:
                os._exit(0)
        children.append(pid)
    os.close(w)
    time.sleep(0.2)  # the reader stalls: every worker's write waits on a full pipe
    received = b""
    while chunk := os.read(r, 4096):
        received += chunk
    os.close(r)
    deadline = time.monotonic() + 20
    while children and time.monotonic() < deadline:
        children = [pid for pid in children if os.waitpid(pid, os.WNOHANG) == (0, 0)]
        time.sleep(0.01)
    for pid in children:  # one that cannot end is killed, and the test fails
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert not children
    lines = received.decode().splitlines()
    pattern = re.compile(r"worker \d line (\d+) (x*)")
    torn = [line for line in lines if not (match := pattern.fullmatch(line))
            or len(match.group(2)) != int(match.group(1)) % 150]
    assert not torn and len(lines) == WORKERS * FLUSHES * LINES, torn[:3]
