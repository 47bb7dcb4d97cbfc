"""Creates with a backlog of owed webhook deliveries against creates with none, side by side
in one run, on the JSON file and on PostgreSQL: deliveries must never slow the create.

Run from the repository root with the project installed, PostgreSQL's server binaries and
wrk:

    python bench/outbox_bench.py                  # 20,000 owed, 7 rounds of 4 s
    python bench/outbox_bench.py --owed 5000 --rounds 5

Every service sends webhooks to one subscriber that accepts each request and never answers
(tests/receiver.py's ``Stalling``), so whatever each create owes stays owed: the only
difference between a pair of configurations is the backlog already there when the load
starts (built before the service starts: through the store on the JSON file, as rows on
PostgreSQL). The goal: each "owed" configuration within 10% of its empty twin.
"""

import argparse
import concurrent.futures
import os
import sys
import tempfile

import loadgen
import psycopg
import serverctl

sys.path.insert(0, os.path.join(serverctl.HERE, "..", "tests"))
from plant_store.stores import JsonFileStore
from plant_store.stores.postgres import PostgresStore
from plant_store.stores.records import Plant
from support.pgserver import PostgresServer, find_bindir
from support.receiver import SECRET, Stalling


def owe_jsonfile(data_dir, url, count):
    """``count`` creates owing ``url`` a delivery, from 16 threads (group commits)."""
    with JsonFileStore(data_dir) as store, concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda n: store.create(Plant(-1 - n, "owed"), (url,)), range(count)))


def owe_postgres(db_url, url, count):
    with PostgresStore(db_url):  # applies the schema
        pass
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO plant_store_plants (id, name, position) "
                     "SELECT -1 - n, 'owed', -1 - n FROM generate_series(0, %s - 1) AS n",
                     [count])
        conn.execute("INSERT INTO plant_store_outbox (id, plant_id, url, body, owed_at) "
                     "SELECT 'owed' || n, -1 - n, %s, '{\"id\":0,\"name\":\"owed\"}', -1 - n "
                     "FROM generate_series(0, %s - 1) AS n", [url, count])
        conn.execute("VACUUM ANALYZE plant_store_outbox")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=4, help="length of each load run")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--owed", type=int, default=20_000, help="deliveries owed at start")
    args = parser.parse_args()

    bindir = find_bindir()
    if bindir is None:
        sys.exit("PostgreSQL's server binaries are not installed (apt-get install postgresql)")
    server = PostgresServer(bindir)
    server.start()
    try:
        with tempfile.TemporaryDirectory() as tmp, Stalling() as hung:
            hooks = ("--webhook-urls", hung.url, "--webhook-secret", SECRET,
                     "--webhook-timeout", "20")
            owed_dir = os.path.join(tmp, "owed")
            owe_jsonfile(owed_dir, hung.url, args.owed)
            owed_db = server.create_database("bench_owed")
            owe_postgres(owed_db, hung.url, args.owed)

            def service(data_dir, *extra):
                return serverctl.plant_store(data_dir, *hooks, *extra, taskset="0")

            def postgres(name, url):
                return service(os.path.join(tmp, name), "--store", "postgresql",
                               "--database-url", url, "--database-pool-size", "16")

            servers = {
                "jsonfile, none owed": service(os.path.join(tmp, "none")),
                f"jsonfile, {args.owed} owed": service(owed_dir),
                "postgresql, none owed": postgres("p0", server.create_database("bench_none")),
                f"postgresql, {args.owed} owed": postgres("p1", owed_db),
            }
            results = loadgen.interleaved(servers, args.rounds, args.seconds)
        loadgen.report(results, baseline="jsonfile, none owed")
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
