"""The PostgreSQL store against the memory store, side by side in one run.

Run from the repository root with the project installed, PostgreSQL's server binaries
(Debian's ``postgresql``), nginx and wrk:

    python bench/postgres_bench.py                 # 9 rounds of 2 s, about 3 minutes
    python bench/postgres_bench.py --fill 100000   # a smaller filled database
    git worktree add /tmp/before <commit>
    python bench/postgres_bench.py --before /tmp/before --only-empty
                                          # a version before a change, in the same rounds

A throwaway PostgreSQL server (the tests' own, ``tests/pgserver.py``: a Unix socket,
``fsync`` and ``synchronous_commit`` on) holds two databases: an empty one, and one filled
with --fill plants beforehand. Configurations, each loaded in turn for the same slices (see
``loadgen.interleaved``): the memory store (the baseline), the PostgreSQL store on the empty
database and on the filled one, and through the nginx example one process against two
processes on the empty database. The service processes are pinned to CPU 0 and the load
to CPU 1; PostgreSQL and nginx run where the kernel puts them, so on a 2-core machine two
service processes cannot show how far the store scales, only that it does not fall over.
"""

import argparse
import contextlib
import os
import pathlib
import sys
import tempfile

import loadgen
import psycopg
import serverctl

sys.path.insert(0, os.path.join(serverctl.HERE, "..", "tests"))
from plant_store.stores.postgres import PostgresStore
from support.pgserver import PostgresServer, find_bindir
from support.proxies import Nginx


def fill(url, count):
    """``count`` plants in one statement, positions below any real transaction's."""
    with PostgresStore(url):  # applies the schema
        pass
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO plant_store_plants (id, name, tag, position) "
            "SELECT -i, convert_to('plant ' || i, 'UTF8'), 'bench', -i "
            "FROM generate_series(1, %s) AS i", [count])
        conn.execute("VACUUM ANALYZE plant_store_plants")


@contextlib.contextmanager
def behind_nginx(tmp, *services):
    """(host, port, token, proc, path) for nginx in front of ``services``' instances, as
    the example serves them: under /api/. ``proc`` is the first instance's."""
    with contextlib.ExitStack() as stack:
        running = [stack.enter_context(s) for s in services]
        nginx_dir = pathlib.Path(tmp, f"nginx-{len(running)}")
        nginx_dir.mkdir()
        nginx = Nginx(nginx_dir, *(port for _, port, _, _ in running))
        try:
            yield "127.0.0.1", nginx.port, running[0][2], running[0][3], "/api/plants"
        finally:
            nginx.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=2, help="length of each load run")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds")
    parser.add_argument("--fill", type=int, default=1_000_000,
                        help="plants in the filled database")
    parser.add_argument("--before", metavar="TREE",
                        help="also run the service from this checkout, on a database of its own")
    parser.add_argument("--only-empty", action="store_true",
                        help="only the memory store and the empty databases")
    args = parser.parse_args()

    bindir = find_bindir()
    if bindir is None:
        sys.exit("PostgreSQL's server binaries are not installed (apt-get install postgresql)")
    server = PostgresServer(bindir)
    server.start()
    try:
        empty = server.create_database("bench_empty")
        filled = server.create_database("bench_filled")
        if not args.only_empty:
            fill(filled, args.fill)
        with tempfile.TemporaryDirectory() as tmp:
            def service(name, url, *extra, tree=None):
                return serverctl.plant_store(
                    os.path.join(tmp, name), "--store", "postgresql", "--database-url", url,
                    "--database-pool-size", "16", *extra, taskset="0", tree=tree)

            proxied = ("--url-prefix", "/api", "--trusted-proxy", "127.0.0.1")
            servers = {
                "service, memory store": serverctl.plant_store(
                    os.path.join(tmp, "m"), "--store", "memory", taskset="0"),
                "postgresql, empty": service("p", empty),
                f"postgresql, {args.fill} stored": service("f", filled),
                # Instances of one deployment share a data_dir here, so its token file:
                # the PostgreSQL store takes no lock on it.
                "postgresql via nginx, 1 process": behind_nginx(
                    tmp, service("n1", empty, *proxied)),
                "postgresql via nginx, 2 processes": behind_nginx(
                    tmp, service("n2", empty, *proxied), service("n2", empty, *proxied)),
            }
            if args.only_empty:
                servers = dict(list(servers.items())[:2])
            if args.before:
                servers["postgresql, empty, before"] = service(
                    "b", server.create_database("bench_before"), tree=args.before)
            results = loadgen.interleaved(servers, args.rounds, args.seconds)
        loadgen.report(results, baseline="service, memory store")
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
