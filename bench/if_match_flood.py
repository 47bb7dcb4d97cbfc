"""The hostile round 5, finding 4: a flood of PUTs with a 253 KB If-Match list (12
connections, with a token) against one honest client creating plants, on the JSON-file
store; before and after, side by side in one run.

    python bench/if_match_flood.py [--before TREE] [--seconds 10]

``--before TREE``: a checkout of the version before the change (``git worktree add``),
run first. Prints, per version: creates/s alone and during the flood, the flood's answers
by status, /ready on the probe port during the flood, and the server's RSS and open
descriptors at the end.
"""

import argparse
import collections
import http.client
import json
import multiprocessing
import os
import socket
import tempfile
import threading
import time

import serverctl


def _honest(host, port, token, seconds, first_id):
    conn = http.client.HTTPConnection(host, port, timeout=30)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    done, plant_id, stop = 0, first_id, time.monotonic() + seconds
    while time.monotonic() < stop:
        conn.request("POST", "/plants", json.dumps({"id": plant_id, "name": "honest"}), headers)
        response = conn.getresponse()
        response.read()
        done += response.status == 200
        plant_id += 1
    conn.close()
    return done / seconds


def _flood(host, port, token, stop, statuses):
    header = ", ".join(f'"{n:032x}"' for n in range(7200))  # 253 KB
    body = json.dumps({"name": "flood"})
    while not stop.is_set():
        try:
            conn = http.client.HTTPConnection(host, port, timeout=30)
            while not stop.is_set():
                conn.request("PUT", "/plants/1", body, {
                    "Authorization": f"Bearer {token}", "Content-Type": "application/json",
                    "If-Match": header})
                response = conn.getresponse()
                response.read()
                statuses[response.status] += 1
        except (OSError, http.client.HTTPException) as exc:
            statuses[type(exc).__name__] += 1


def _flood_process(host, port, token, stop, results):
    """The flood in a process of its own, so the honest client's GIL is its own."""
    statuses, halt = collections.Counter(), threading.Event()
    threads = [threading.Thread(target=_flood, args=(host, port, token, halt, statuses))
               for _ in range(12)]
    for thread in threads:
        thread.start()
    stop.wait()
    halt.set()
    for thread in threads:
        thread.join(60)
    results.put(dict(statuses))


def _ready(host, port):
    try:
        with socket.create_connection((host, port), timeout=2) as sock:
            sock.sendall(b"GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return sock.recv(100).split(b" ")[1].decode()
    except OSError as exc:
        return type(exc).__name__


def run(tree, seconds):
    with tempfile.TemporaryDirectory() as data:
        probe = 18000 + os.getpid() % 1000
        with serverctl.plant_store(data, "--probe-port", str(probe), tree=tree) as (
                host, port, token, proc):
            conn = http.client.HTTPConnection(host, port)
            conn.request("POST", "/plants", json.dumps({"id": 1, "name": "x"}),
                         {"Authorization": f"Bearer {token}",
                          "Content-Type": "application/json"})
            conn.getresponse().read()
            alone = _honest(host, port, token, seconds, 1_000_000)
            stop, results = multiprocessing.Event(), multiprocessing.Queue()
            flooder = multiprocessing.Process(target=_flood_process,
                                              args=(host, port, token, stop, results))
            flooder.start()
            time.sleep(1)
            ready = _ready(host, probe)
            during = _honest(host, port, token, seconds, 2_000_000)
            stop.set()
            statuses = results.get(timeout=60)
            flooder.join(60)
            with open(f"/proc/{proc.pid}/status") as fh:
                rss = next(line.split()[1] for line in fh if line.startswith("VmRSS"))
            fds = len(os.listdir(f"/proc/{proc.pid}/fd"))
    return {"creates/s alone": round(alone), "creates/s during": round(during),
            "flood answers": statuses, "/ready during": ready,
            "RSS kB at end": int(rss), "fds at end": fds}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--before")
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    if args.before:
        print("before:", run(args.before, args.seconds), flush=True)
    print("after: ", run(None, args.seconds), flush=True)


if __name__ == "__main__":
    main()
