"""Slow readers against ``plant-store serve`` (issue 42, finding 1), and what an honest
client gets meanwhile.

Run from the repository root with the project installed (with the ``[docs-page]`` extra,
for the bundle)::

    .venv/bin/python bench/slow_readers.py                      # this tree
    git clone -q . /tmp/before42 && git -C /tmp/before42 checkout -q 5ca6834
    .venv/bin/python bench/slow_readers.py --tree /tmp/before42  # the code before the fix

A server with its default settings and a probe port; ``--connections`` attackers each
pipeline ``--requests`` GETs of ``/docs/swagger-ui-bundle.js`` (1.4 MB, public) and read
``--read`` bytes every ``--every`` seconds, and open a new connection at once when the
server closes one, or when one has been open ``--renew`` seconds (before the fix, the
server's ``request_timeout``, 30 s, closed each once the kernel held megabytes for it and
the answer stopped moving from waitress's view; a plain close left the kernel sending
those for minutes, so the attacker never noticed; one that knows the timeout renews its
connections before it). After ``--warmup`` seconds, for ``--duration`` seconds, one honest
client creates plants one after another, each on a new connection with a 10 s timeout,
while ``/ready`` is asked on the probe port every 2 s. Printed at the end, with the attack
still on: creates made and failed, creates/s, the probe's answers, the server's RSS and
open descriptors, the kernel's TCP memory and orphaned sockets (``/proc/net/sockstat``:
what closed connections still hold), at the end and at most (sampled every 2 s), and how
many attack connections the server closed.
"""

import argparse
import collections
import http.client
import json
import os
import socket
import tempfile
import threading
import time

from serverctl import plant_store

BUNDLE = "/docs/swagger-ui-bundle.js"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Attack:
    """The slow readers, from one thread."""

    def __init__(self, address, count, requests, read, every, renew):
        self._address, self._read, self._every, self._renew = address, read, every, renew
        self._head = f"GET {BUNDLE} HTTP/1.1\r\nHost: x\r\n\r\n".encode() * requests
        self._stopping = threading.Event()
        self.closed = self.refused = 0
        self.received = 0
        self.socks = [self._open() for _ in range(count)]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _open(self):
        """A connection with its requests sent (the kernel takes it, and them, even while
        the server accepts none), or None when that failed."""
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(5)
        try:
            sock.connect(self._address)
            sock.sendall(self._head)
        except OSError:
            sock.close()
            self.refused += 1
            return None
        sock.setblocking(False)
        return sock, time.monotonic()

    def _run(self):
        while not self._stopping.wait(self._every):
            for n, entry in enumerate(self.socks):
                if entry is None:
                    self.socks[n] = self._open()
                    continue
                sock, opened = entry
                if time.monotonic() - opened > self._renew:
                    sock.close()
                    self.socks[n] = self._open()
                    continue
                try:
                    data = sock.recv(self._read)
                    self.received += len(data)
                    gone = not data
                except (BlockingIOError, InterruptedError):
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    self.closed += 1
                    sock.close()
                    self.socks[n] = self._open()

    def stop(self):
        self._stopping.set()
        self._thread.join(10)
        for entry in self.socks:
            if entry is not None:
                entry[0].close()


def request(host, port, method, path, body=None, token=None, timeout=10):
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def server_figures(pid):
    with open(f"/proc/{pid}/status") as fh:
        rss = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
    return rss / 1024, len(os.listdir(f"/proc/{pid}/fd"))


def sockstat():
    """TCP sockets orphaned (closed by their process, still sending) and the kernel's TCP
    memory in MB, from /proc/net/sockstat."""
    with open("/proc/net/sockstat") as fh:
        tcp = next(line.split() for line in fh if line.startswith("TCP:"))
    fields = dict(zip(tcp[1::2], map(int, tcp[2::2]), strict=True))
    return fields["orphan"], fields["mem"] * os.sysconf("SC_PAGE_SIZE") / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", help="a checkout to run the server from (the code before)")
    parser.add_argument("--connections", type=int, default=98)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--read", type=int, default=6144)
    parser.add_argument("--every", type=float, default=5)
    parser.add_argument("--renew", type=float, default=25)
    parser.add_argument("--warmup", type=float, default=10)
    parser.add_argument("--duration", type=float, default=45)
    parser.add_argument("--server", default="waitress", help="waitress or granian")
    args = parser.parse_args()
    probes = free_port()
    with tempfile.TemporaryDirectory() as data, plant_store(
            data, "--probe-port", str(probes), "--server", args.server,
            tree=args.tree) as (host, port, token, proc):
        assert request(host, port, "GET", BUNDLE)[0] == 200, "no bundle: install [docs-page]"
        attack = Attack((host, port), args.connections, args.requests, args.read, args.every,
                        args.renew)
        try:
            time.sleep(args.warmup)
            ready = collections.Counter()
            peaks = [0.0, 0, 0.0]  # RSS MB, descriptors, kernel TCP MB
            stopping = threading.Event()

            def probe():
                while not stopping.is_set():
                    now = (*server_figures(proc.pid), sockstat()[1])
                    peaks[:] = map(max, peaks, now)
                    try:
                        ready[request(host, probes, "GET", "/ready", timeout=2)[0]] += 1
                    except OSError:
                        ready["no answer in 2 s"] += 1
                    stopping.wait(2)

            prober = threading.Thread(target=probe)
            prober.start()
            made = failed = 0
            started = time.monotonic()
            while time.monotonic() - started < args.duration:
                try:
                    status = request(host, port, "POST", "/plants",
                                     json.dumps({"id": made, "name": "honest"}), token)[0]
                except OSError:
                    status = None
                if status == 200:
                    made += 1
                else:
                    failed += 1
            elapsed = time.monotonic() - started
            stopping.set()
            prober.join()
            rss, fds = server_figures(proc.pid)
            orphans, tcp_mb = sockstat()
            print(f"tree: {args.tree or 'this one'}; attack: {args.connections} connections x "
                  f"{args.requests} GETs of {BUNDLE}, {args.read} B every {args.every:g} s, "
                  f"renewed after {args.renew:g} s; {args.warmup:g} s warm-up, "
                  f"{elapsed:.0f} s measured")
            print(f"honest creates made       {made}")
            print(f"honest creates failed     {failed} (10 s timeout each)")
            print(f"honest creates/s          {made / elapsed:.2f}")
            print("probe /ready answers      " + ", ".join(
                f"{status}: {n}" for status, n in sorted(ready.items(), key=str)))
            print(f"server RSS                {rss:.0f} MB at the end, {peaks[0]:.0f} MB at most")
            print(f"server descriptors        {fds} at the end, {peaks[1]} at most")
            print(f"kernel TCP memory         {tcp_mb:.0f} MB at the end, {peaks[2]:.0f} MB at "
                  f"most; {orphans} orphaned sockets at the end")
            print(f"attack connections closed {attack.closed} by the server; "
                  f"{sum(entry is not None for entry in attack.socks)} open, "
                  f"{attack.refused} connects failed")
            print(f"attack bytes received     {attack.received / 1e6:.1f} MB")
        finally:
            attack.stop()


if __name__ == "__main__":
    main()
