"""The service against the server's ceiling, side by side in one run.

Run from the repository root with the project installed:

    python bench/ceiling_bench.py                  # 15 rounds of 2 s, about 2 minutes
    python bench/ceiling_bench.py --rounds 9 --seconds 3
    git worktree add /tmp/before HEAD~3 && python bench/ceiling_bench.py --before /tmp/before

Three servers with the same waitress settings, each pinned to CPU 0 with the load on CPU 1:
a bare WSGI callable that reads the body and answers fixed JSON (the ceiling), the service
with the memory store, and the service with the JSON-file store (fsync on). Everything a
deployment has is on: token check, validation, access log at info. Prints requests/s,
p50/p99 latency, non-2xx answers, the server's CPU time per request, and each as a ratio
to the ceiling's (for CPU time, ceiling / service: the share of the ceiling's capacity the
service keeps when the CPU is the limit); then the resident
memory of the memory store after --fill creates. With ``--before DIR`` the service is also
run from the checkout in DIR, in the same rounds, so a change is measured before and after
side by side.
"""

import argparse
import os
import tempfile

import loadgen
import serverctl


def memory_per_plant(count):
    """Resident bytes per plant of a MemoryStore filled through the schema layer."""
    out = loadgen.in_fresh_python(f"""
from plant_store.http.schemas import NewPlantSchema
from plant_store.stores import MemoryStore
store, load = MemoryStore(), NewPlantSchema().load
before = rss()
for i in range({count}):
    store.create(load({{"id": i, "name": f"plant {{i}}", "tag": "bench"}}))
print(rss() - before, len(store))
""")
    return int(out[0]), int(out[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=2, help="length of each load run")
    parser.add_argument("--rounds", type=int, default=15,
                        help="interleaved rounds; medians and paired ratios are reported")
    parser.add_argument("--fill", type=int, default=1_000_000,
                        help="creates before measuring the memory store's resident memory")
    parser.add_argument("--proxied", action="store_true",
                        help="also the memory store with trusted_proxy and url_prefix set "
                             "(the forwarded-header rewrite on every request)")
    parser.add_argument("--before", metavar="DIR",
                        help="also run the service from this checkout (the code before a change)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        servers = {
            "bare WSGI on waitress (ceiling)": serverctl.bare(taskset="0"),
            "service, memory store": serverctl.plant_store(
                os.path.join(tmp, "m"), "--store", "memory", taskset="0"),
            "service, JSON-file store (fsync)": serverctl.plant_store(
                os.path.join(tmp, "j"), taskset="0"),
        }
        proxied = ("--store", "memory", "--trusted-proxy", "127.0.0.1", "--url-prefix", "/api")
        if args.proxied:
            servers["service, memory store, proxied"] = serverctl.plant_store(
                os.path.join(tmp, "p"), *proxied, taskset="0")
        if args.before and args.proxied:
            servers["before: service, memory store, proxied"] = serverctl.plant_store(
                os.path.join(tmp, "bp"), *proxied, taskset="0", tree=args.before)
        if args.before:
            servers["before: service, memory store"] = serverctl.plant_store(
                os.path.join(tmp, "bm"), "--store", "memory", taskset="0", tree=args.before)
            servers["before: service, JSON-file store (fsync)"] = serverctl.plant_store(
                os.path.join(tmp, "bj"), taskset="0", tree=args.before)
        results = loadgen.interleaved(servers, args.rounds, args.seconds)

    loadgen.report(results, baseline="bare WSGI on waitress (ceiling)")
    rss, count = memory_per_plant(args.fill)
    print(f"\nmemory store after {count} creates: {rss / 2**20:.0f} MiB resident, "
          f"{rss / count:.0f} bytes per plant")


if __name__ == "__main__":
    main()
