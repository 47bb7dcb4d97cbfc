"""``plant-store import`` and ``export`` of many plants, before and after a change, in one run.

Run from the repository root with the project installed and, for PostgreSQL, its server
binaries (Debian's ``postgresql``)::

    git worktree add /tmp/before37 main            # the code before issue 37
    python bench/transfer_bench.py --before /tmp/before37
    python bench/transfer_bench.py --plants 100000 --stores jsonfile   # a quick look

A file of ``--plants`` plants (ids all over int64 in random order, names of 8 to 30
characters, two tags in three) is imported by the real command, then exported, into and
out of each store, by this tree's code and (``--before``) the other tree's, one after the
other in the same run. Each command is timed whole, from the process's start (the store's
opening included: reading back the JSON file's journal, or a PostgreSQL migration) to its
end. Both export the store this tree's code imported (the formats did not change), and
each export is checked to be the imported file, byte for byte. The before code imports
one plant per create, about 6,000 a second into the JSON file and fewer into PostgreSQL,
so ``--before-plants`` (default 100,000) imports only the file's first that many into a
store of its own: its seconds for the full count are extrapolated from that (marked ``~``).

Then the resumed import (this tree only): the command killed with SIGKILL once it has
stored about half the plants, and run again; the rerun's seconds, and a check that every
plant is stored once, in the file's order.

A throwaway PostgreSQL server (the tests' own, ``tests/pgserver.py``: a Unix socket,
``fsync`` and ``synchronous_commit`` on) holds one database per run. The JSON-file store
runs with ``fsync`` on, in a directory under ``--tmp`` (default /tmp).
"""

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import orjson
import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from support.pgserver import PostgresServer, find_bindir  # noqa: E402

TREE = os.path.dirname(HERE)


def make_source(path: str, count: int, seed: int = 37) -> None:
    rng = random.Random(seed)
    ids: set[int] = set()
    while len(ids) < count:
        ids.add(rng.randrange(-(2**63), 2**63))
    order = sorted(ids, key=lambda _: rng.random())
    with open(path, "wb") as out:
        for n, plant_id in enumerate(order):
            plant = {"id": plant_id, "name": f"plant {n} " + "x" * rng.randrange(0, 20)}
            if n % 3:
                plant["tag"] = ("aroid", "Tåg")[n % 2]
            out.write(orjson.dumps(plant, option=orjson.OPT_APPEND_NEWLINE))


def head(path: str, count: int, out: str) -> None:
    with open(path, "rb") as src, open(out, "wb") as dst:
        for _, line in zip(range(count), src, strict=False):
            dst.write(line)


def command(tree: str, *args: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": tree, "PLANT_STORE_LOG_LEVEL": "warning"}
    return subprocess.Popen([sys.executable, "-m", "plant_store", *args], cwd=tree, env=env,
                            **popen)


def timed(tree: str, *args: str) -> float:
    return said(tree, *args)[0]


def said(tree: str, *args: str) -> tuple[float, str]:
    """The seconds a command took, and its last line on standard error."""
    began = time.perf_counter()
    proc = command(tree, *args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = proc.communicate()
    took = time.perf_counter() - began
    if proc.returncode:
        sys.exit(f"{' '.join(args)} failed: {err.decode()}")
    return took, err.decode().strip().splitlines()[-1]


class Stores:
    """Where each run's store is: a new data directory, and a new database."""

    def __init__(self, tmp: str, server: PostgresServer | None) -> None:
        self.tmp, self.server, self.made = tmp, server, 0

    def new(self, kind: str) -> list[str]:
        self.made += 1
        data_dir = os.path.join(self.tmp, f"store{self.made}")
        if kind == "jsonfile":
            return ["--store", "jsonfile", "--data-dir", data_dir]
        assert self.server is not None
        url = self.server.create_database(f"bench{self.made}")
        return ["--store", "postgresql", "--database-url", url, "--data-dir", data_dir]


def stored(store: list[str]) -> int:
    """Plants the store holds, read from outside while an import runs."""
    if store[1] == "jsonfile":
        try:
            with open(os.path.join(store[3], "plants.jsonl"), "rb") as fh:
                return fh.read().count(b"\n")
        except FileNotFoundError:
            return 0
    try:
        with psycopg.connect(store[3]) as conn:
            return conn.execute("SELECT count(*) FROM plant_store_plants").fetchone()[0]
    except psycopg.errors.UndefinedTable:
        return 0


def exported(tree: str, store: list[str], source: str) -> float:
    """Seconds of an export of ``store``, which must give ``source`` back, byte for byte."""
    out = source + ".out"
    took = timed(tree, "export", *store, "--output", out)
    with open(source, "rb") as a, open(out, "rb") as b:
        if a.read() != b.read():
            sys.exit(f"the export by {tree} is not the file imported")
    os.unlink(out)
    return took


def resumed(store: list[str], source: str, count: int) -> tuple[int, float, str]:
    """Kill an import once it has stored about half, run it again: the plants stored at the
    kill, the rerun's seconds and last line; exits unless every plant is stored once, in
    order."""
    proc = command(TREE, "import", *store, "--input", source, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    while stored(store) < count // 2:
        if proc.poll() is not None:
            sys.exit("the import ended before it could be killed")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    at_kill = stored(store)
    took, line = said(TREE, "import", *store, "--input", source)
    out = source + ".again"
    timed(TREE, "export", *store, "--output", out)
    with open(source, "rb") as a, open(out, "rb") as b:
        if a.read() != b.read():
            sys.exit("after the kill and the rerun, the store is not the file")
    os.unlink(out)
    return at_kill, took, line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plants", type=int, default=1_000_000)
    parser.add_argument("--before", metavar="TREE", help="also run this checkout's code")
    parser.add_argument("--before-plants", type=int, default=100_000,
                        help="plants the before code imports (a rate; extrapolated)")
    parser.add_argument("--stores", default="jsonfile,postgresql")
    parser.add_argument("--tmp", default="/tmp")
    parser.add_argument("--no-kill", action="store_true", help="skip the resumed import")
    args = parser.parse_args()
    kinds = args.stores.split(",")

    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(dir=args.tmp,
                                                              prefix="transfer-bench-"))
        server = None
        if "postgresql" in kinds:
            bindir = find_bindir()
            if bindir is None:
                sys.exit("PostgreSQL's server binaries are not installed")
            server = PostgresServer(bindir)
            stack.callback(server.cleanup)
            server.start()
        stores = Stores(tmp, server)
        source = os.path.join(tmp, "plants.jsonl")
        make_source(source, args.plants)
        trees = {"after": TREE}
        if args.before:
            trees = {"before": os.path.abspath(args.before), **trees}
            few = min(args.before_plants, args.plants)
            prefix = os.path.join(tmp, "prefix.jsonl")
            head(source, few, prefix)
        print(f"{args.plants} plants, {os.path.getsize(source) / 1e6:.0f} MB of JSON Lines; "
              "seconds of the whole command, and plants a second")
        print(f"{'store':<11}{'code':<8}{'import s':>10}{'/s':>9}{'export s':>11}{'/s':>9}")
        for kind in kinds:
            full = stores.new(kind)
            took = {"after": timed(TREE, "import", *full, "--input", source)}
            if args.before:
                took["before"] = timed(trees["before"], "import", *stores.new(kind),
                                       "--input", prefix) * args.plants / few
            for name, tree in trees.items():
                out = exported(tree, full, source)  # the store the after code imported
                mark = "~" if name == "before" and few != args.plants else " "
                print(f"{kind:<11}{name:<8}{mark}{took[name]:>9.1f}"
                      f"{args.plants / took[name]:>9.0f}{out:>11.1f}"
                      f"{args.plants / out:>9.0f}", flush=True)
        if not args.no_kill:
            for kind in kinds:
                at_kill, took, line = resumed(stores.new(kind), source, args.plants)
                print(f"{kind}: import killed (SIGKILL) at {at_kill} plants stored; the "
                      f"rerun took {took:.1f} s ({line}); then every plant once, in order",
                      flush=True)


if __name__ == "__main__":
    main()
