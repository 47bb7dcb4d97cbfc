"""The real-server half of tests/unit/http/test_access_log.py: access lines: one per request,
written by a background thread, never a token or body."""

import os
import socket

import pytest

from support.access_logs import lines_when, logged_app
from support.servers import Server


# Python 3.12+ warns about fork() in a process with threads; forking one is the point here.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_an_app_built_before_a_fork_logs_in_the_forked_worker(tokens, token, tmp_path):
    # As under gunicorn --preload: the app and its flusher thread are made in the parent;
    # the child has no threads but its own flusher must still write the child's lines.
    app, stream = logged_app(tokens, token)
    out = tmp_path / "child.log"
    pid = os.fork()
    if pid == 0:
        try:
            app.get("/nope", status=404)
            out.write_text("\n".join(lines_when(stream, 1)))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert "GET /nope 404" in out.read_text()


def test_control_characters_in_a_path_are_escaped_one_line_per_request(tmp_path):
    forged = "2026-11-22 21:05:51,123 INFO [plant_store.access] 203.0.113.9 GET /forged 200"
    paths = [f"/plants%0a{forged.replace(' ', '%20')}", "/plants%0dx", "/plants%1b[2Jx\\y"]
    with Server(tmp_path / "data") as server:
        for path in paths:
            with socket.create_connection((server.host, server.port), timeout=5) as sock:
                sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                             .encode())
                assert sock.recv(100).startswith(b"HTTP/1.1 401 ")
    access = [line for line in "".join(server.stderr).splitlines()
              if "[plant_store.access]" in line]
    assert len(access) == len(paths), access
    assert [line.split(" ", 6)[6].rsplit(" ", 3)[0] for line in access] == [
        f"/plants\\x0a{forged}", "/plants\\x0dx", "/plants\\x1b[2Jx\\\\y"]
