"""The service against what a user would write in an afternoon, and both against bare
waitress, side by side in one run.

Run from the repository root with the project installed, PostgreSQL's server binaries
(Debian's ``postgresql``) and wrk:

    python bench/speed_bench.py                        # 16 connections, 9 rounds of 2 s
    python bench/speed_bench.py --connections 1,16,64 --rounds 5
    python bench/speed_bench.py --only postgresql,plain-postgresql
    git worktree add /tmp/before <commit> && python bench/speed_bench.py --before /tmp/before

Configurations (``--only`` takes their names; the baseline always runs):

    bare              bare waitress serving a trivial WSGI app (``bare_app.py``): the baseline
    memory            ours, memory store
    jsonfile          ours, JSON-file store (fsync)
    plain-memory      ``straightforward.py``: Falcon + marshmallow, a dict under a lock
    postgresql        ours, PostgreSQL store (pool of 10)
    plain-postgresql  ``straightforward.py`` on a psycopg pool of 10 (autocommit; INSERT ...
                      ON CONFLICT DO NOTHING RETURNING, then a SELECT on a conflict)
    plain-postgresql-sb  the same with waitress's send_bytes as the service sets it
    bare-defaults     the trivial app on waitress as it comes (the baseline has the
                      service's server settings, send_bytes among them)

with ``--before TREE`` also ours from TREE, each beside its own when that runs:
``before-memory``, ``before-jsonfile``, ``before-postgresql``.

A throwaway PostgreSQL cluster (``tests/pgserver.py``: a Unix socket, ``fsync`` and
``synchronous_commit`` on) holds a database for each PostgreSQL-backed server. Every server
is started once and pinned to CPU 0; so is the cluster (the postmaster and its processes;
backends it forks later inherit it); wrk runs on CPU 1. The servers take turns under the
load (``loadgen.take_turns``), one at a time, so the cluster's CPU time over a slice
(utime + stime of all its processes, from /proc, the reaped ones' included) is that
configuration's: printed per create as "pg us", beside the server's own "cpu us".
"""

import argparse
import contextlib
import os
import resource
import sys
import tempfile
import time

import loadgen
import serverctl

sys.path.insert(0, os.path.join(serverctl.HERE, "..", "tests"))
from support.pgserver import PostgresServer, _children, _stat, find_bindir

BASELINE = "bare waitress, trivial WSGI app"
POOL_SIZE = "10"  # ours by default; the straightforward app's min_size = max_size
TICKS = os.sysconf("SC_CLK_TCK")


def cluster_pids(postmaster):
    return [postmaster, *_children(postmaster)]


def cluster_cpu(postmaster):
    """CPU seconds of the cluster so far: the postmaster with its reaped children (its
    cutime and cstime: backends and autovacuum workers that ended) and the live ones."""
    fields = _stat(postmaster)
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    for pid in _children(postmaster):
        child = _stat(pid)
        ticks += int(child[11]) + int(child[12]) if child else 0
    return ticks / TICKS


def busy_cpu():
    """CPU seconds the whole machine has been busy (user, nice, system, irq, softirq)."""
    with open("/proc/stat") as fh:
        fields = fh.readline().split()[1:]
    return sum(int(fields[i]) for i in (0, 1, 2, 5, 6)) / TICKS


def own_cpu(servers, postmaster):
    """CPU seconds of this run's processes: servers, cluster, this script and its reaped
    children (every wrk)."""
    me, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                       resource.RUSAGE_CHILDREN))
    return (sum(map(loadgen.cpu_seconds, servers)) + cluster_cpu(postmaster)
            + me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime)


def affinities(pids):
    cpus = set()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            cpus |= os.sched_getaffinity(pid)
    return sorted(cpus)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", default="16",
                        help="comma-separated wrk connection counts: a table for each")
    parser.add_argument("--seconds", type=int, default=2, help="length of each load run")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds")
    parser.add_argument("--only", help="comma-separated configuration names (see above)")
    parser.add_argument("--before", metavar="TREE",
                        help="also our memory, JSON-file and PostgreSQL stores from this checkout")
    args = parser.parse_args()
    connections = [int(c) for c in args.connections.split(",")]

    bindir = find_bindir()
    if bindir is None:
        sys.exit("PostgreSQL's server binaries are not installed (apt-get install postgresql)")
    pg = PostgresServer(bindir)
    pg.start()
    try:
        for pid in cluster_pids(pg.pid):  # backends forked from now on inherit it
            os.sched_setaffinity(pid, {0})
        with tempfile.TemporaryDirectory() as tmp:
            def ours(name, *store, tree=None):
                return serverctl.plant_store(os.path.join(tmp, name), *store, taskset="0",
                                             tree=tree)

            def ours_pg(name, tree=None):
                return ours(name, "--store", "postgresql", "--database-pool-size", POOL_SIZE,
                            "--database-url", pg.create_database(f"speed_{name}"), tree=tree)

            def plain(name, url=None, **tuned):
                env = {"TOKEN": f"bench-{name}", **({"DATABASE_URL": url} if url else {}),
                       **tuned}
                command = [sys.executable, os.path.join(serverctl.HERE, "straightforward.py")]
                return _with_token(serverctl.running(command, "0", env=env), env["TOKEN"])

            configurations = {  # name: (label, server); the servers start only when entered
                "bare": (BASELINE, serverctl.bare(taskset="0")),
                "memory": ("ours, memory store", ours("m", "--store", "memory")),
                "jsonfile": ("ours, JSON file (fsync)", ours("j", "--store", "jsonfile")),
                "plain-memory": ("straightforward, memory dict", plain("memory")),
                "postgresql": ("ours, PostgreSQL", ours_pg("ours")),
                "plain-postgresql": ("straightforward, psycopg pool",
                                     plain("pg", pg.create_database("speed_plain"))),
                "plain-postgresql-sb": ("straightforward, psycopg, send_bytes", plain(
                    "pgsb", pg.create_database("speed_plain_sb"), SEND_BYTES="18000")),
                "bare-defaults": ("bare waitress, waitress's defaults",
                                  serverctl.bare(taskset="0", waitress_defaults=True)),
            }
            if args.before:
                configurations["before-memory"] = ("before: ours, memory store", ours(
                    "bm", "--store", "memory", tree=args.before))
                configurations["before-jsonfile"] = ("before: ours, JSON file (fsync)", ours(
                    "bj", "--store", "jsonfile", tree=args.before))
                configurations["before-postgresql"] = ("before: ours, PostgreSQL",
                                                       ours_pg("before", tree=args.before))
            chosen = ["bare", *(args.only.split(",") if args.only else configurations)]
            chosen += [f"before-{name}" for name in chosen if f"before-{name}" in configurations]
            unknown = set(chosen) - set(configurations)
            if unknown:
                sys.exit(f"unknown configurations: {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(configurations)}")
            with contextlib.ExitStack() as stack:
                running = {configurations[name][0]: stack.enter_context(
                    configurations[name][1]) for name in dict.fromkeys(chosen)}
                servers = [proc.pid for _, _, _, proc in running.values()]
                print(f"servers on CPUs {affinities(servers)}; PostgreSQL's "
                      f"{len(cluster_pids(pg.pid))} processes on CPUs "
                      f"{affinities(cluster_pids(pg.pid))}; wrk on CPU 1", flush=True)
                for count in connections:
                    started = time.monotonic(), busy_cpu(), own_cpu(servers, pg.pid)
                    results = loadgen.take_turns(running, args.rounds, args.seconds, count,
                                                 {"pg_us": lambda: cluster_cpu(pg.pid)})
                    print()
                    loadgen.report(results, BASELINE, extra=[("pg_us", "pg us")])
                    wall = time.monotonic() - started[0]
                    others = busy_cpu() - started[1] - (own_cpu(servers, pg.pid) - started[2])
                    print(f"other work on the machine meanwhile: {others / wall:.2f} of its "
                          f"{os.cpu_count()} CPUs", flush=True)
                print(f"\nafterwards: PostgreSQL's {len(cluster_pids(pg.pid))} processes on "
                      f"CPUs {affinities(cluster_pids(pg.pid))}")
    finally:
        pg.cleanup()


@contextlib.contextmanager
def _with_token(server, token):
    """serverctl.running's (host, port, proc) as the (host, port, token, proc) of the rest."""
    with server as (host, port, proc):
        yield host, port, token, proc


if __name__ == "__main__":
    main()
