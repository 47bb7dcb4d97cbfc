"""The JSON-file store against the memory store, side by side, and as it grows.

Run from the repository root with the project installed:

    python bench/store_bench.py                 # about 2 minutes
    python bench/store_bench.py --rounds 5 --seconds 10

Prints create throughput and p50/p99 latency over real HTTP (waitress, 16 keep-alive
clients) for the memory store, the JSON-file store with fsync and without (unsafe), then
the JSON-file store preloaded with --preload plants: start-up time, resident memory per
plant, and create throughput against the empty store's.
"""

import argparse
import os
import tempfile
import time

import loadgen
import orjson
import serverctl


def preload(data_dir, count):
    """Write ``count`` plants straight into a journal, as the store itself would."""
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(data_dir, "plants.jsonl"), "wb") as fh:
        batch = []
        for i in range(count):
            batch.append(orjson.dumps({"op": "create", "id": -1 - i, "name": f"preloaded {i}",
                                       "tag": "bench"}))
            if len(batch) == 10000:
                fh.write(b"\n".join(batch) + b"\n")
                batch = []
        if batch:
            fh.write(b"\n".join(batch) + b"\n")
        fh.flush()
        os.fsync(fh.fileno())  # else the server's first fsync pays for the whole preload


def measure_open(data_dir):
    """Open the store in a fresh interpreter: seconds to read it, and resident bytes added."""
    out = loadgen.in_fresh_python(f"""
import time
from plant_store.stores import JsonFileStore
before = rss(); started = time.perf_counter()
store = JsonFileStore({data_dir!r})
print(time.perf_counter() - started, rss() - before, len(store))
""")
    return float(out[0]), int(out[1]), int(out[2])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=3, help="length of each load run")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds; medians and paired ratios are reported")
    parser.add_argument("--preload", type=int, default=1_000_000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        big = os.path.join(tmp, "big")
        started = time.perf_counter()
        preload(big, args.preload)
        print(f"preloaded {args.preload} plants in {time.perf_counter() - started:.1f} s "
              f"({os.path.getsize(os.path.join(big, 'plants.jsonl')) / 2**20:.0f} MiB)")
        seconds, rss, count = measure_open(big)
        print(f"start-up: read {count} plants in {seconds:.2f} s; resident memory "
              f"{rss / 2**20:.0f} MiB, {rss / max(count, 1):.0f} bytes per plant\n")

        configs = {
            "memory": (os.path.join(tmp, "m"), "--store", "memory"),
            "jsonfile, fsync": (os.path.join(tmp, "j"),),
            "jsonfile, fsync=false (UNSAFE)": (os.path.join(tmp, "u"), "--fsync", "false"),
            f"jsonfile, fsync, {args.preload} stored": (big,),
        }
        servers = {label: serverctl.plant_store(data_dir, *flags, taskset="0")
                   for label, (data_dir, *flags) in configs.items()}
        results = loadgen.interleaved(servers, args.rounds, args.seconds)

    rps = loadgen.report(results, baseline="memory")
    grown, empty = rps[f"jsonfile, fsync, {args.preload} stored"], rps["jsonfile, fsync"]
    print(f"\n{args.preload} stored / empty JSON-file store: {grown / empty:.2f}")


if __name__ == "__main__":
    main()
