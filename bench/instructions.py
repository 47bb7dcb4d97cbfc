"""Instructions per create, bare waitress against the service: a measure the host's noise
cannot move.

    python bench/instructions.py          # about 15 minutes; needs Debian's valgrind
    python bench/instructions.py --tree /tmp/before   # the service from another checkout

Each server runs under ``valgrind --tool=callgrind`` (which counts every instruction the
process executes) and gets creates one at a time over one keep-alive connection; a run of
N2 creates minus a run of N1 cancels start-up and shutdown. One connection keeps waitress's
select loop to the same turns per request for both servers, so the count is repeatable. It
says nothing of cache misses, which is why ``ceiling_bench.py`` stays the measure of record.
"""

import argparse
import glob
import http.client
import json
import os
import sys
import tempfile

import serverctl


def creates(host, port, token, count, first_id):
    conn = http.client.HTTPConnection(host, port, timeout=120)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for plant_id in range(first_id, first_id + count):
        body = json.dumps({"id": plant_id, "name": f"plant {plant_id}", "tag": "bench"})
        conn.request("POST", "/plants", body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"create answered {response.status}")
    conn.close()


def instructions(server, out, count):
    """Instructions the server executed in all, started, given ``count`` creates, stopped."""
    with server as (host, port, token, _):
        creates(host, port, token, count, 10**9)
    (dump,) = glob.glob(os.path.join(out, "callgrind.out.*"))
    with open(dump) as fh:
        total = next(int(line.split()[1]) for line in fh if line.startswith("summary:"))
    os.unlink(dump)
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, nargs=2, default=(200, 1200), metavar=("N1", "N2"))
    parser.add_argument("--tree", metavar="DIR",
                        help="run the service from this checkout (the code before a change)")
    parser.add_argument("--no-bare", action="store_true", help="skip the ceiling")
    args = parser.parse_args()
    n1, n2 = args.creates
    with tempfile.TemporaryDirectory() as tmp:
        valgrind = ["valgrind", "--tool=callgrind",
                    f"--callgrind-out-file={tmp}/callgrind.out.%p"]
        servers = {
            "bare WSGI on waitress (ceiling)": lambda n: serverctl.bare(wrapper=valgrind),
            "service, memory store": lambda n: serverctl.plant_store(
                os.path.join(tmp, f"m{n}"), "--store", "memory", wrapper=valgrind, tree=args.tree),
            # One connection: every create has an fsync of its own (no group to share it).
            # A fresh data directory for each run, so no create is a replay.
            "service, JSON-file store (fsync)": lambda n: serverctl.plant_store(
                os.path.join(tmp, f"j{n}"), wrapper=valgrind, tree=args.tree),
        }
        if args.no_bare:
            del servers["bare WSGI on waitress (ceiling)"]
        counts = {}
        for label, server in servers.items():
            low, high = (instructions(server(n), tmp, n) for n in (n1, n2))
            counts[label] = (high - low) / (n2 - n1)
            print(f"{label:<36} {counts[label]:10,.0f} instructions a create", flush=True)
    bare = counts.get("bare WSGI on waitress (ceiling)")
    for label, count in counts.items():
        if bare and count != bare:
            print(f"ceiling / {label}: {bare / count:.2f}")


if __name__ == "__main__":
    sys.exit(main())
