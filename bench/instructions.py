"""Instructions per create, bare waitress against the service: a measure the host's noise
cannot move.

    python bench/instructions.py          # about 10 minutes; needs Debian's valgrind

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
    args = parser.parse_args()
    n1, n2 = args.creates
    with tempfile.TemporaryDirectory() as tmp:
        valgrind = ["valgrind", "--tool=callgrind",
                    f"--callgrind-out-file={tmp}/callgrind.out.%p"]
        servers = {
            "bare WSGI on waitress (ceiling)": lambda: serverctl.bare(wrapper=valgrind),
            "service, memory store": lambda: serverctl.plant_store(
                os.path.join(tmp, "m"), "--store", "memory", wrapper=valgrind),
        }
        counts = {}
        for label, server in servers.items():
            low, high = (instructions(server(), tmp, n) for n in (n1, n2))
            counts[label] = (high - low) / (n2 - n1)
            print(f"{label:<36} {counts[label]:10,.0f} instructions a create", flush=True)
    bare, service = counts.values()
    print(f"ceiling / service: {bare / service:.2f}")


if __name__ == "__main__":
    sys.exit(main())
