"""Run ``plant-store serve`` as a real subprocess and talk HTTP to it."""

import collections
import contextlib
import http.client
import itertools
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit


def http_request(host, port, method, path, body=None, token=None, headers=None, timeout=10,
                 source=None, context=None):
    """One request on a fresh connection: (status, headers, parsed JSON or raw bytes);
    ``source`` is a local address to send from, e.g. 127.0.0.2; ``context``: an
    ``ssl.SSLContext`` to speak HTTPS with (it verifies the server's certificate)."""
    source_address = (source, 0) if source else None
    if context is None:
        conn = http.client.HTTPConnection(host, port, timeout=timeout,
                                          source_address=source_address)
    else:
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=context,
                                           source_address=source_address)
    try:
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        if token:
            all_headers["Authorization"] = f"Bearer {token}"
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        conn.request(method, path, body=body, headers=all_headers)
        response = conn.getresponse()
        data = response.read()
        if response.getheader("Content-Type") == "application/json" and data:
            data = json.loads(data)
        return response.status, response.headers, data
    finally:
        conn.close()


Answer = collections.namedtuple("Answer", "status headers body raw sent")


def exchange(host, port, head, chunks=(), source=None, timeout=5):
    """Send ``head``, then each of ``chunks`` from a thread, while reading the answer here, so
    it is seen even when the server refuses the rest and closes early. Returns an Answer:
    status, headers (lower-case names), body (parsed when JSON), the raw bytes received and
    how many bytes the server let the client send (an upper bound of what it read)."""
    sock = socket.create_connection((host, port), timeout=timeout,
                                    source_address=(source, 0) if source else None)
    sent = 0

    def send():
        nonlocal sent
        try:
            for data in itertools.chain([head], chunks):
                view = memoryview(data)
                while view:
                    count = sock.send(view)
                    sent += count
                    view = view[count:]
        except OSError:
            pass  # the server closed: it refused the rest

    sender = threading.Thread(target=send)
    sender.start()
    raw = b""
    try:
        while not _complete(raw):
            try:
                data = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not data:
                break
            raw += data
    finally:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # wakes the sender
        sender.join(timeout)
        sock.close()
    return Answer(*parse_answer(raw), raw, sent)


def _final(raw):
    """The answer after any interim ``100 Continue``."""
    while raw.startswith(b"HTTP/1.1 100 ") and b"\r\n\r\n" in raw:
        raw = raw.partition(b"\r\n\r\n")[2]
    return raw


def _complete(raw):
    head, sep, body = _final(raw).partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    return bool(sep) and length is not None and len(body) >= int(length.group(1))


def parse_answer(raw):
    """(status, headers with lower-case names, body parsed when JSON) of a raw answer."""
    head, _, body = _final(raw).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines[0] else None
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    if headers.get("content-type") == "application/json":
        body = json.loads(body)
    return status, headers, body


_PORTS = random.Random()
_handed_out = set()


def _own_ports():
    """This process's share of ports 10000 to 32000: under pytest-xdist each worker
    (``PYTEST_XDIST_WORKER`` gw0, gw1, ...) draws from its own slice, so two workers never
    hand out one port between one's probe and its server's bind."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    width = (32000 - 10000) // count
    first = 10000 + int(worker.removeprefix("gw")) % count * width
    return first, first + width


def free_port():
    """A port nobody listens on (yet), on any address: chosen below the kernel's ephemeral
    range, which the kernel hands to outgoing connections and to port 0 binds, so the port
    is not taken between now and the server's bind by some client's connection (a proxy
    once failed to start that way), and from this worker's own range (``_own_ports``)."""
    while True:
        port = _PORTS.randrange(*_own_ports())
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port


def run_cli(*args, env=None):
    """Run a ``plant-store`` command to completion."""
    return subprocess.run(
        [sys.executable, "-m", "plant_store", *args], capture_output=True, text=True,
        env={**os.environ, **(env or {})}, timeout=60,
    )


def ended(process, timeout=15):
    """Wait up to ``timeout`` s for ``process`` to end (after a stop signal), then kill it."""
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_answering(port, process, path="/ready", timeout=20):
    """Until ``path`` answers 200 on ``port``; fail if ``process`` (a server) ends first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if http_request("127.0.0.1", port, "GET", path)[0] == 200:
                return
        except OSError:
            pass
        assert time.monotonic() < deadline and process.poll() is None, "the server failed"
        time.sleep(0.1)


class Server:
    """A ``plant-store serve`` process on a free port; its output is collected as it comes."""

    def __init__(self, data_dir, *args, env=None, wait=True, prelude=None, cwd=None):
        """``prelude``: Python run in the server's process before it starts (a fault);
        ``cwd``: where it runs (``-m plant_store`` imports the package found there first)."""
        serve = ["serve", "--port", "0", "--data-dir", str(data_dir), *args]
        command = [sys.executable, "-m", "plant_store", *serve]
        if prelude:
            command = [sys.executable, "-c", f"{prelude}\nfrom plant_store.cli import main\n"
                       f"raise SystemExit(main({serve!r}))"]
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})}, cwd=cwd,
        )
        self.stdout, self.stderr = [], []
        self._readers = [
            threading.Thread(target=self._collect, args=(self.proc.stdout, self.stdout)),
            threading.Thread(target=self._collect, args=(self.proc.stderr, self.stderr)),
        ]
        for reader in self._readers:
            reader.start()
        self.url = None
        if wait:
            self.wait_ready()

    @staticmethod
    def _collect(stream, lines):
        for line in stream:
            lines.append(line)

    def wait_ready(self, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(r"listening on (https?://\S+)", "".join(self.stderr))
            if match:
                self.url = match.group(1)
                self.host, self.port = urlsplit(self.url).hostname, urlsplit(self.url).port
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise AssertionError("server did not start:\n" + "".join(self.stderr))

    @property
    def first_token(self):
        """The token the first start printed (to stdout, which may lag stderr a little)."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            match = re.search(r"only this once:\s+(\S+)\n", "".join(self.stdout))
            if match:
                return match.group(1)
            time.sleep(0.02)
        raise AssertionError("no token was printed:\n" + "".join(self.stdout))

    def request(self, method, path, body=None, token=None, headers=None, timeout=10,
                source=None):
        return http_request(self.host, self.port, method, path, body, token, headers, timeout,
                            source)

    def stop(self, sig=signal.SIGTERM, timeout=15):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        ended(self.proc, timeout)
        for reader in self._readers:
            reader.join(5)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.stop()


class StoreHolder:
    """Another process that holds ``data_dir``'s store (its lock) until ``release()``."""

    def __init__(self, data_dir, store="jsonfile"):
        code = ("import sys\nfrom plant_store.config import Config\n"
                "from plant_store.stores import open_store\n"
                f"store = open_store(Config(store={store!r}, data_dir=sys.argv[1]))\n"
                "print('held', flush=True)\nsys.stdin.read()\nstore.close()\n")
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(data_dir)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline() == "held\n"
        self.pid = self.proc.pid

    def release(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(15)
        self.proc.stdout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.release()


def listing(request, token, prefix=""):
    """Every plant, following the Link header's cursors page by page."""
    plants, path = [], f"{prefix}/plants?limit=1000"
    while path:
        status, headers, page = request("GET", path, token=token)
        assert status == 200
        plants += page
        link = re.search(r"<([^>]*)>; rel=next", headers.get("Link") or "")
        path = None
        if link:
            parts = urlsplit(link.group(1))
            path = f"{parts.path}?{parts.query}"
    return plants


def closed_within(sock, seconds=1.0):
    """Whether the server ended the connection (EOF or reset) within ``seconds``; reads
    (and drops) whatever it sent before."""
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
