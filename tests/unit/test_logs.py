"""The server's log queue (issue 42, finding 5): a stderr nobody reads costs a bounded
amount of memory and counted lines, never a writer's wait; the gap is marked in the log."""

import errno
import fcntl
import json
import os
import threading
import time

from hypothesis import given
from hypothesis import strategies as st

from plant_store import logs
from plant_store.logs import FORMAT, JsonFormatter, LineQueue, TextFormatter, pieces

F_SETPIPE_SZ = 1031  # Linux's fcntl commands (not in Python's fcntl before 3.10 on all builds)
F_GETPIPE_SZ = 1032


EARLIER = "e" * 63 + "\n"  # lines that filled the pipe before


def stalled_pipe():
    """A pipe as small as Linux makes one, full, that nobody reads (yet): its read end and
    write end."""
    r, w = os.pipe()
    fcntl.fcntl(w, F_SETPIPE_SZ, 4096)
    capacity = fcntl.fcntl(w, F_GETPIPE_SZ)
    os.write(w, EARLIER.encode() * (capacity // len(EARLIER)))
    return r, w


def read_all(r, w, queue):
    """Read the pipe while the queue drains, then to its end; the text."""
    chunks = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: os.read(r, 1 << 16),
                                                                b"")))
    reader.start()
    deadline = time.monotonic() + 5
    while not queue.drain(0.1):  # not waited for until it has taken something again
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.close(w)
    reader.join(5)
    os.close(r)
    return b"".join(chunks).decode()


def test_a_stderr_nobody_reads_costs_at_most_the_limit_and_no_writer_waits():
    r, w = stalled_pipe()
    queue = LineQueue(w, TextFormatter(FORMAT), limit=2000)
    line = "x" * 99 + "\n"
    began = time.monotonic()
    taken = [queue.write(line) for _ in range(500)]
    assert time.monotonic() - began < 1  # 50 kB into a full pipe: no write waited
    dropped = taken.count(0)
    assert set(taken) == {0, len(line)}
    # What was taken is being written or waits: never more than the limit.
    assert (len(taken) - dropped) * len(line) <= 2000

    began = time.monotonic()
    assert not queue.drain(0.3)  # stderr takes nothing: a stop waits this long, no longer
    assert 0.3 <= time.monotonic() - began < 1.5
    began = time.monotonic()
    assert not queue.drain(5)  # nor again, while it still takes nothing
    assert time.monotonic() - began < 0.5

    text = read_all(r, w, queue)  # the gap's count written by the drain
    lines = [text for text in text.splitlines() if text != EARLIER.strip()]
    assert lines.count(line.strip()) == len(taken) - dropped  # whole lines, none torn
    start, end = (i for i, text in enumerate(lines) if "[plant_store.logs]" in text)
    assert all(text == line.strip() for text in lines[:start])  # the gap is marked where
    assert "log lines dropped from here on: stderr is not taking them" in lines[start]
    assert lines[start].split()[2] == "WARNING"
    assert f"{dropped} log lines were dropped" in lines[end] and end == len(lines) - 1


def test_the_gap_is_closed_by_the_next_line_taken_and_marked_in_the_logs_format():
    r, w = stalled_pipe()
    queue = LineQueue(w, JsonFormatter(), limit=1000)
    record = json.dumps({"message": "m" * 80}) + "\n"
    taken = [queue.write(record) for _ in range(200)]
    dropped = taken.count(0)
    assert dropped
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: os.read(r, 1 << 16),
                                                                b"")))
    chunks = []
    reader.start()
    deadline = time.monotonic() + 5
    while queue.write("after\n") == 0:  # the first one taken once the reader reads
        assert time.monotonic() < deadline
        dropped += 1
        time.sleep(0.01)
    assert queue.drain(5)  # it took "after": waited for again
    os.close(w)
    reader.join(5)
    os.close(r)
    lines = b"".join(chunks).decode().splitlines()
    assert lines[-1] == "after" and lines[0] == EARLIER.strip()
    notices = [json.loads(text) for text in lines if '"logger":"plant_store.logs"' in text]
    assert [(n["level"], n["message"].split(":")[0]) for n in notices] == [
        ("WARNING", "log lines dropped from here on"),
        ("WARNING", f"{dropped} log lines were dropped")]
    assert lines[-2] == json.dumps(notices[1], separators=(",", ":"))  # just before it


@given(st.lists(st.binary(max_size=300).map(lambda b: b.replace(b"\n", b"") + b"\n"),
                max_size=60), st.integers(16, 512))
def test_the_writer_writes_whole_lines_of_at_most_pipe_buf_a_write(lines, size):
    data = b"".join(lines)
    written = list(pieces(data, size))
    assert b"".join(written) == data
    for piece in written:
        assert piece.endswith(b"\n")
        assert len(piece) <= size or piece.count(b"\n") == 1  # a longer line: alone



def test_a_write_that_fails_for_a_while_loses_its_lines_not_the_log(monkeypatch):
    """The hostile pass on issue 52's third round: one failed write (a full disk, freed
    later) ended every later line of the process; now it loses its own lines, and the next
    write says how many."""
    r, w = os.pipe()
    failing = [True]
    real_write = os.write

    def write(fd, data):
        if fd == w and failing[0]:
            failing[0] = False
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(logs.os, "write", write)
    queue = LineQueue(w, TextFormatter(FORMAT))
    queue.write("lost 1\nlost 2\n")
    assert queue.drain(5)
    queue.write("kept\n")
    assert queue.drain(5)
    os.close(w)
    with os.fdopen(r) as reader:
        text = reader.read()
    assert "lost" not in text and text.endswith("kept\n")
    assert "2 log lines were dropped" in text


def test_a_full_non_blocking_descriptor_is_waited_for_as_a_blocking_one():
    """A non-blocking stderr that is full (EAGAIN) loses nothing: the writer waits until
    it takes more, as it would on a blocking one (it ended the log for good)."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    queue = LineQueue(w, TextFormatter(FORMAT))
    lines = [f"line {n} " + "x" * 90 + "\n" for n in range(2000)]  # past the pipe's 64 KiB
    for line in lines:
        queue.write(line)
    received, deadline = b"", time.monotonic() + 10
    with os.fdopen(r, "rb") as reader:
        while len(received) < len("".join(lines)):
            assert time.monotonic() < deadline, f"{len(received)} bytes arrived"
            time.sleep(0.01)
            received += reader.read1(1 << 16)
        assert queue.drain(5)
    os.close(w)
    assert received.decode() == "".join(lines)
