"""The service against the Falcon floor of the same server, on granian and on waitress,
with the straightforward Falcon + marshmallow app, side by side in one run (issues 43, 52).

Run from the repository root with the project and the granian extra installed, ``wrk``
and, for the PostgreSQL rows, Debian's ``postgresql`` (the server binaries; without them
those rows are left out):

    python bench/servers_bench.py                       # 5 rounds of 3 s
    python bench/servers_bench.py --tree /tmp/before    # ours from that checkout too
    python bench/servers_bench.py --only floor,memory   # rows whose name has a word given

Every server pinned to CPU 0 (taskset; granian's workers inherit it), and so is a
throwaway PostgreSQL cluster (``tests/pgserver.py``: fsync and synchronous_commit on, a
Unix socket; backends forked later inherit the pin); the load on CPU 1: 16 keep-alive
connections creating plants of about 60 bytes with a bearer token (``create.lua`` with
wrk). Each server starts once; they take turns in slices, the order turning each round
(``loadgen.take_turns``). Each ratio is paired by round with the floor of the same server:

- the Falcon floor (``bare_app.falcon_floor``: one resource whose ``on_post`` reads the
  body and answers fixed JSON, no middleware), on granian (``bare_granian.py``: one worker,
  16 blocking threads, as the service sets granian up) and on waitress (``bare_app.py``,
  the service's own server settings);
- bare WSGI (``bare_app.application``) on each, above the floor;
- the durable floor (``bare_app.falcon_floor_durable``): the Falcon floor whose create
  waits for a group fsync of its body and nothing else, the ceiling of any store that
  fsyncs before it answers on the server's threads; the JSON file's rows are also given
  as a ratio to it;
- ours: memory, JSON file (fsync), PostgreSQL; with ``--tree`` the same from that checkout;
- ``straightforward.py`` (Falcon + marshmallow, written as a user would): its dict on
  granian, its psycopg pool on granian and on waitress.

"cpu us" is the CPU time per create of the processes that serve (granian's workers, not
its master); "pg us" the cluster's. The machine's load (``uptime``) is printed before and
after. Targets: on granian, ours >= 0.75 of the floor (memory), >= 0.60 (JSON file); on
waitress >= 0.85 (memory); PostgreSQL >= 2.0x the straightforward psycopg app, p99 no
worse.
"""

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time

import loadgen
import serverctl
import speed_bench
from speed_bench import PostgresServer, cluster_cpu, cluster_pids, find_bindir

HERE = os.path.dirname(os.path.abspath(__file__))
PLAIN_PG = "straightforward waitress psycopg"


class _Workers:
    """The worker processes of a running granian master: those whose CPU time counts."""

    def __init__(self, master_pid, count):
        self.master = master_pid
        deadline = time.monotonic() + 10
        while True:
            children = []
            for task in os.listdir(f"/proc/{master_pid}/task"):
                with open(f"/proc/{master_pid}/task/{task}/children") as fh:
                    children += [int(pid) for pid in fh.read().split()]
            if len(children) >= count:
                self.pids = children
                self.pid = children[0]
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(children)} granian workers of {count}")
            time.sleep(0.05)


@contextlib.contextmanager
def on_granian(server, workers=1):
    """``server`` (a serverctl context) with its workers' PIDs in place of the master's."""
    with server as (host, port, token, proc):
        yield host, port, token, _Workers(proc.pid, workers)


@contextlib.contextmanager
def app_on_granian(target, env=None, token="unused"):
    command = [sys.executable, os.path.join(HERE, "bare_granian.py"), target]
    with serverctl.running(command, taskset="0", cwd=HERE, env=env) as (host, port, proc):
        yield host, port, token, _Workers(proc.pid, 1)


@contextlib.contextmanager
def plain_on_waitress(env):
    command = [sys.executable, os.path.join(HERE, "straightforward.py")]
    with serverctl.running(command, taskset="0", env=env) as (host, port, proc):
        yield host, port, env["TOKEN"], proc


def load():
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


def servers(tmp, pg, tree):
    """name -> (server, label) of every configuration (started only when entered)."""
    def ours(name, *flags, tree=None):
        return serverctl.plant_store(os.path.join(tmp, name), *flags, taskset="0", tree=tree)

    def pg_flags(name):
        return ("--store", "postgresql", "--database-pool-size", speed_bench.POOL_SIZE,
                "--database-url", pg.create_database(name))

    def plain_env(name, store=True):
        url = {"DATABASE_URL": pg.create_database(name)} if store else {}
        return {"TOKEN": f"bench-{name}", **url}

    granian = ("--server", "granian")
    found = {
        "granian floor": app_on_granian("bare_app:falcon_floor()"),
        "granian bare": app_on_granian("bare_app:application"),
        "granian durable floor": app_on_granian("bare_app:falcon_floor_durable()"),
        "waitress durable floor": bare_on_waitress({"BARE_APP": "durable"}),
        "waitress floor": bare_on_waitress({"BARE_APP": "falcon"}),
        "waitress bare": bare_on_waitress({}),
        "straightforward granian dict": app_on_granian(
            "straightforward:create_app()", plain_env("dict", False), "bench-dict"),
    }
    trees = {"": None, **({"before ": tree} if tree else {})}
    for prefix, code in trees.items():
        short = prefix[:1]
        found[f"{prefix}ours granian memory"] = on_granian(
            ours(f"{short}gm", *granian, "--store", "memory", tree=code))
        found[f"{prefix}ours granian jsonfile"] = on_granian(
            ours(f"{short}gj", *granian, tree=code))
        found[f"{prefix}ours waitress memory"] = ours(f"{short}wm", "--store", "memory",
                                                      tree=code)
        found[f"{prefix}ours waitress jsonfile"] = ours(f"{short}wj", tree=code)
        if pg is not None:
            found[f"{prefix}ours granian postgresql"] = on_granian(
                ours(f"{short}gp", *granian, *pg_flags(f"ours_{short}g"), tree=code))
    if pg is not None:
        pg_env, wpg_env = plain_env("plain_granian"), plain_env("plain_waitress")
        found["straightforward granian psycopg"] = app_on_granian(
            "straightforward:create_app()", pg_env, pg_env["TOKEN"])
        found[PLAIN_PG] = plain_on_waitress(wpg_env)
    return found


@contextlib.contextmanager
def bare_on_waitress(env):
    command = [sys.executable, os.path.join(HERE, "bare_app.py")]
    with serverctl.running(command, taskset="0", env=env) as (host, port, proc):
        yield host, port, "unused", proc


def report(results):
    """Each row's medians, and its ratios paired by round with its server's floor."""
    first = next(iter(results.values()))[0]
    print(f"{len(next(iter(results.values())))} rounds, {first['connections']} "
          f"connections ({first['tool']}); medians; ratios paired by round with the floor "
          "of the same server (waitress for the straightforward psycopg app on waitress)")
    print(f"{'configuration':<34} {'req/s':>7} {'floor x':>7} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'non-2xx':>7} {'cpu us':>7} {'pg us':>6}")
    ratios = {}
    for name, runs in results.items():
        floor = "waitress floor" if "waitress" in name else "granian floor"
        ratio = loadgen.paired_ratio(runs, results[floor], "rps")
        ratios[name] = ratio
        print(f"{name:<34} {median(runs, 'rps'):7.0f} {ratio:7.2f} "
              f"{median(runs, 'p50_ms'):7.2f} {median(runs, 'p99_ms'):7.2f} "
              f"{sum(r['non_2xx'] for r in runs):7d} {median(runs, 'cpu_us'):7.1f} "
              f"{median(runs, 'pg_us'):6.1f}")
    return ratios


def median(runs, key):
    return statistics.median(r[key] for r in runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=3, help="length of each load run")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds; medians and paired ratios are reported")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--tree", metavar="DIR", help="also ours from this checkout")
    parser.add_argument("--only", help="comma-separated words: rows whose name has one "
                        "(the floors always run)")
    args = parser.parse_args()
    bindir = find_bindir()
    pg = None
    if bindir is None:
        print("PostgreSQL's server binaries are not installed: no PostgreSQL rows")
    else:
        pg = PostgresServer(bindir)
        pg.start()
        for pid in cluster_pids(pg.pid):  # backends forked from now on inherit it
            os.sched_setaffinity(pid, {0})
    counters = {"pg_us": (lambda: cluster_cpu(pg.pid)) if pg else (lambda: 0.0)}
    print(f"load before (uptime): {load()}", flush=True)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            chosen = servers(tmp, pg, args.tree)
            if args.only:
                words = args.only.split(",")
                chosen = {name: server for name, server in chosen.items()
                          if "floor" in name or any(word in name for word in words)}
            with contextlib.ExitStack() as stack:
                running = {name: stack.enter_context(server)
                           for name, server in chosen.items()}
                pids = [pid for *_, proc in running.values()
                        for pid in [getattr(proc, "master", proc.pid),
                                    *getattr(proc, "pids", [])]]
                started = (time.monotonic(), speed_bench.busy_cpu(),
                           speed_bench.own_cpu(pids, pg.pid) if pg else 0.0)
                results = loadgen.take_turns(running, args.rounds, args.seconds,
                                             args.connections, counters)
                wall = time.monotonic() - started[0]
                others = (speed_bench.busy_cpu() - started[1]
                          - ((speed_bench.own_cpu(pids, pg.pid) if pg else 0.0)
                             - started[2])) / wall
    finally:
        if pg is not None:
            pg.cleanup()
    print()
    ratios = report(results)
    print(f"load after (uptime): {load()}; other work on the machine meanwhile: "
          f"{others:.2f} of its {os.cpu_count()} CPUs")
    for name, target in (("ours granian memory", 0.75), ("ours granian jsonfile", 0.60),
                         ("ours waitress memory", 0.85)):
        if name in ratios:
            verdict = "met" if ratios[name] >= target else "NOT met"
            print(f"target {name}: >= {target:.2f} of the floor: {ratios[name]:.2f}, {verdict}")
    for name in [n for n in results if n.endswith("jsonfile")]:
        floor = ("waitress" if "waitress" in name else "granian") + " durable floor"
        print(f"{name}: {loadgen.paired_ratio(results[name], results[floor], 'rps'):.2f} "
              f"of the {floor} (the Falcon floor waiting for a group fsync)")
    if PLAIN_PG in results:
        for name in [n for n in results if n.endswith("ours granian postgresql")]:
            ratio = loadgen.paired_ratio(results[name], results[PLAIN_PG], "rps")
            p99 = loadgen.paired_ratio(results[name], results[PLAIN_PG], "p99_ms")
            verdict = "met" if ratio >= 2.0 and p99 <= 1.0 else "NOT met"
            print(f"target {name}: >= 2.0x {PLAIN_PG}, p99 no worse: {ratio:.2f}x, "
                  f"p99 {p99:.2f}x, {verdict}")


if __name__ == "__main__":
    main()
