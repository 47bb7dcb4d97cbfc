"""Compaction of a large JSON-file store while a writer keeps creating: how long it takes,
and how long the writer waits at the most."""

import argparse
import tempfile
import threading
import time

from plant_store.stores import JsonFileStore
from plant_store.stores.records import Plant


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plants", type=int, default=1_000_000,
                        help="creates before the compaction; every other one is deleted")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = JsonFileStore(tmp, fsync=False, compact_share=0)  # a fast fill
        for plant_id in range(args.plants):
            store.create(Plant(plant_id, f"plant {plant_id}", "tag"))
        for plant_id in range(0, args.plants, 2):
            store.delete(plant_id)
        store._fsync = True  # the writer's creates are durable, as in service
        waits, stop = [], threading.Event()

        def writer():
            plant_id = 2 * args.plants
            while not stop.is_set():
                started = time.monotonic()
                store.create(Plant(plant_id, "writer"))
                waits.append(time.monotonic() - started)
                plant_id += 1

        thread = threading.Thread(target=writer)
        thread.start()
        time.sleep(0.5)
        started = time.monotonic()
        before, after = store.compact()
        took = time.monotonic() - started
        stop.set()
        thread.join()
        store.close()
    print(f"{args.plants} creates, {args.plants // 2} deletes: compacted {before} to {after} "
          f"bytes in {took:.2f} s; the writer made {len(waits)} creates in the 0.5 s before "
          f"and during it, the longest waiting {max(waits) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
