"""What anonymous clients can hold of ``plant-store serve --server granian`` (issue 49,
findings 1-4), and what an honest client gets meanwhile: one row per attack.

Run from the repository root with the project installed (``[test]`` brings h2 and the
docs page's bundle)::

    .venv/bin/python bench/granian_edge.py                       # this tree
    git clone -q . /tmp/before49 && git -C /tmp/before49 checkout -q dd91b38
    .venv/bin/python bench/granian_edge.py --tree /tmp/before49  # the code before the fix

Each attack runs against a fresh server (JSON file store, a probe port, its defaults but
``--workers``): ``h2``: connections that speak h2c with prior knowledge, open no window
and ask for ``/openapi.json`` on 190 streams; ``unread``: HTTP/1.1 connections that ask
for the 1.4 MB bundle and read nothing; ``idle``: connections that send nothing, under a
descriptor limit of 256 (``prlimit``); ``kill``: one worker killed with SIGKILL. For
``--duration`` seconds after the attack starts, one honest client creates plants one
after another, each on a new connection with a 5 s timeout, and ``/ready`` is asked on
the probe port every second. Printed per attack: the workers' RSS growth per attack
connection (at most, sampled every second), honest creates/s, the probe's answers, and
whether the server still serves.
"""

import argparse
import collections
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time

import h2.config
import h2.connection
import h2.settings
from serverctl import plant_store
from slow_readers import free_port, request

BUNDLE = "/docs/swagger-ui-bundle.js"


def workers(proc):
    out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
    return [int(pid) for pid in out.stdout.split()]


def rss_mb(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as fh:
                total += next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
        except OSError:
            pass
    return total / 1024


def h2_connection(address):
    sock = socket.create_connection(address, timeout=5)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    for n in range(190):
        conn.send_headers(1 + 2 * n, [(":method", "GET"), (":path", "/openapi.json"),
                                      (":scheme", "http"), (":authority", "x")],
                          end_stream=True)
    sock.sendall(conn.data_to_send())
    return sock


def unread_connection(address):
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(5)
    sock.connect(address)
    sock.sendall(f"GET {BUNDLE} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return sock


def idle_connection(address):
    return socket.create_connection(address, timeout=5)


ATTACKS = {"h2": (h2_connection, 40), "unread": (unread_connection, 200),
           "idle": (idle_connection, 300), "kill": (None, 0)}


def run(attack, args):
    opener, count = ATTACKS[attack]
    probes = free_port()
    wrapper = ("prlimit", "--nofile=256") if attack == "idle" else ()
    extra = ("--workers", str(args.workers)) if args.workers > 1 else ()
    with tempfile.TemporaryDirectory() as data, plant_store(
            data, "--server", "granian", "--probe-port", str(probes), *extra,
            *(("--store", args.store) if args.store else ()),
            *(("--database-url", args.database_url) if args.database_url else ()),
            tree=args.tree, wrapper=wrapper) as (host, port, token, proc):
        time.sleep(0.5)
        pids = workers(proc)
        before = rss_mb(pids)
        socks, failed_opens = [], 0
        if opener is None:
            os.kill(pids[0], signal.SIGKILL)
        for _ in range(count):
            try:
                socks.append(opener((host, port)))
            except OSError:
                failed_opens += 1
        ready, stop, peak = collections.Counter(), threading.Event(), [before]

        def probe():
            while not stop.wait(1):
                peak[0] = max(peak[0], rss_mb(workers(proc)))
                try:
                    ready[request(host, probes, "GET", "/ready", timeout=2)[0]] += 1
                except OSError:
                    ready["none"] += 1

        prober = threading.Thread(target=probe)
        prober.start()
        made = failed = 0
        started = time.monotonic()
        while time.monotonic() - started < args.duration:
            try:
                status = request(host, port, "POST", "/plants",
                                 json.dumps({"id": made + failed, "name": "honest"}), token,
                                 timeout=5)[0]
            except OSError:
                status = None
                time.sleep(0.05)
            made, failed = (made + 1, failed) if status == 200 else (made, failed + 1)
        elapsed = time.monotonic() - started
        stop.set()
        prober.join()
        grown = max(peak[0], rss_mb(workers(proc))) - before
        per = f"{grown / count:.2f} MB" if count else "-"
        up = proc.poll() is None
        for sock in socks:
            sock.close()
        probe_text = ", ".join(f"{k}: {v}" for k, v in sorted(ready.items(), key=str))
        print(f"| {attack} x {count} | {per} ({grown:.0f} MB) | {made / elapsed:.0f} "
              f"({failed} failed) | {probe_text} | {'up' if up else 'DOWN'} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", help="a checkout to run the server from (the code before)")
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--store", help="memory, jsonfile (default) or postgresql")
    parser.add_argument("--database-url")
    parser.add_argument("attacks", nargs="*", default=list(ATTACKS))
    args = parser.parse_args()
    print(f"tree: {args.tree or 'this one'}; load: {os.getloadavg()[0]:.2f}")
    print("| attack | RSS per connection (peak growth) | honest creates/s | probe /ready | "
          "server |")
    print("|---|---|---|---|---|")
    for attack in args.attacks:
        try:
            run(attack, args)
        except Exception as exc:  # the server may not survive the code before
            print(f"| {attack} | - | - | - | failed: {exc!r:.80} |", flush=True)


if __name__ == "__main__":
    main()
