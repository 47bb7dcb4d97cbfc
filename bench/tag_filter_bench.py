"""GET /plants?tag=T's page time at 1,000 and at 1,000,000 plants, JSON file and PostgreSQL,
side by side: a page is a range of each store's tag index, so the two sizes should cost
about the same.

Run from the repository root with the project installed and PostgreSQL's server binaries
(Debian's ``postgresql``):

    .venv/bin/python bench/tag_filter_bench.py              # about 2 minutes
    .venv/bin/python bench/tag_filter_bench.py --sizes 1000 100000

Each store is filled beforehand: the JSON file by writing its journal (then opened, so the
index is the one a start-up builds), PostgreSQL with one INSERT ... SELECT (then VACUUM
ANALYZE). Every even plant is tagged "hot" (half the store), every odd one "tag N" for N
its id modulo 100 (50 tags, 1% each). Each round times full pages, from cursors spread
over the store (first page to 40% in): of 100 "hot" plants, and of 5 plants of one rare
tag, at every size in turn; medians over rounds, in microseconds per page, through the
Store API (the HTTP layer costs the same at any size).
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

import orjson
import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from plant_store.stores import JsonFileStore
from plant_store.stores.postgres import PostgresStore
from support.pgserver import PostgresServer, find_bindir

TAGS = 100
PAGE = 100


def tag_of(i):
    return "hot" if i % 2 == 0 else f"tag {i % TAGS}"


def fill_jsonfile(data_dir, count):
    with open(os.path.join(data_dir, "plants.jsonl"), "wb") as fh:
        for start in range(0, count, 100_000):
            fh.write(b"".join(
                orjson.dumps({"op": "create", "id": i, "name": f"plant {i}",
                              "tag": tag_of(i)}) + b"\n"
                for i in range(start, min(count, start + 100_000))))
    return JsonFileStore(data_dir, fsync=False, compact_share=0)


def fill_postgres(url, count):
    with PostgresStore(url):  # applies the schema
        pass
    with psycopg.connect(url, autocommit=True) as conn:  # positions below any real create's
        conn.execute(
            "INSERT INTO plant_store_plants (id, name, tag, position) "
            "SELECT i, convert_to('plant ' || i, 'UTF8'), convert_to(CASE WHEN i %% 2 = 0 "
            "THEN 'hot' ELSE 'tag ' || (i %% %s) END, 'UTF8'), i - %s "
            "FROM generate_series(0, %s - 1) AS i", [TAGS, count, count])
        conn.execute("VACUUM ANALYZE plant_store_plants")
    return PostgresStore(url)


def cursors(count, offset):
    """Cursor positions spread over the store: each page from one is full."""
    return [offset + int(count * share) for share in (0.0, 0.2, 0.4)]


def time_pages(store, starts, tag, limit):
    took = []
    for start in starts:
        began = time.perf_counter()
        plants, _ = store.page(start, limit, tag)
        took.append(time.perf_counter() - began)
        assert len(plants) == limit and all(plant.tag == tag for plant in plants)
    return statistics.median(took) * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 1_000_000])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    stores = {}
    server = PostgresServer(find_bindir())
    server.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for size in args.sizes:
                began = time.perf_counter()
                data_dir = os.path.join(tmp, f"json-{size}")
                os.mkdir(data_dir)
                stores["jsonfile", size] = (fill_jsonfile(data_dir, size), 0)
                url = server.create_database(f"bench_{size}")
                stores["postgresql", size] = (fill_postgres(url, size), -size)
                print(f"filled {size:,} plants in {time.perf_counter() - began:.0f} s",
                      file=sys.stderr)
            kinds = {"hot": PAGE, "rare": 5}
            times = {(kind, key[0], key[1]): [] for kind in kinds for key in stores}
            rng = random.Random(1)
            for _ in range(args.rounds):
                keys = list(stores)
                rng.shuffle(keys)
                rare = f"tag {rng.randrange(1, TAGS, 2)}"
                for key in keys:
                    store, offset = stores[key]
                    for kind, limit in kinds.items():
                        times[kind, key[0], key[1]].append(time_pages(
                            store, cursors(key[1], offset), "hot" if kind == "hot" else rare,
                            limit))
            print(f"median of {args.rounds} rounds, microseconds per page")
            print(f"{'page':<34}" + "".join(f"{size:>12,}" for size in args.sizes) + "   ratio")
            for kind, limit in kinds.items():
                for name in ("jsonfile", "postgresql"):
                    medians = [statistics.median(times[kind, name, size]) for size in args.sizes]
                    label = f"{name}, {limit} of {kind} ({'50' if kind == 'hot' else '1'}%)"
                    print(f"{label:<34}" + "".join(f"{m:>12.0f}" for m in medians)
                          + f"   {medians[-1] / medians[0]:.2f}")
            for store, _ in stores.values():
                store.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
