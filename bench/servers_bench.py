"""The service on granian and on waitress, bare granian and the straightforward Falcon +
marshmallow app, side by side in one run (issue 43).

Run from the repository root with the project and the granian extra installed, Debian's
``postgresql`` (the server binaries) and ``wrk``:

    python bench/servers_bench.py                  # 5 rounds of 3 s, about 5 minutes

Every server pinned to CPU 0 (taskset; granian's workers inherit it), and so is a
throwaway PostgreSQL cluster (``tests/pgserver.py``: fsync and synchronous_commit on, a
Unix socket; backends forked later inherit the pin); the load on CPU 1: 16 keep-alive
connections creating plants of about 60 bytes with a bearer token (``create.lua`` with
wrk). Configurations, each started once and loaded in turn (``loadgen.take_turns``):

- bare WSGI on granian (``bare_granian.py``: ``bare_app.application``, the ceiling and the
  baseline of every ratio);
- ours on granian: memory, JSON file (fsync), PostgreSQL with 1 worker and with 2;
- ours on waitress: memory, JSON file, PostgreSQL;
- ``straightforward.py`` (Falcon + marshmallow, written as a user would) on granian, with
  its dict and with its psycopg pool, and on waitress with its psycopg pool.

"cpu us" is the CPU time per create of the processes that serve (granian's workers, not
its master); "pg us" the cluster's. Targets: memory on granian >= 0.70 of bare granian;
JSON file on granian >= 0.55; PostgreSQL >= 2.0x the straightforward psycopg app (on
waitress) with p99 no worse.
"""

import argparse
import contextlib
import os
import sys
import tempfile
import time

import loadgen
import serverctl
import speed_bench
from speed_bench import PostgresServer, cluster_cpu, cluster_pids, find_bindir

HERE = os.path.dirname(os.path.abspath(__file__))
BASELINE = "bare WSGI on granian (ceiling)"
PLAIN_PG = "straightforward psycopg, waitress"


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=3, help="length of each load run")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds; medians and paired ratios are reported")
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    bindir = find_bindir()
    if bindir is None:
        sys.exit("PostgreSQL's server binaries are not installed (apt-get install postgresql)")
    pg = PostgresServer(bindir)
    pg.start()
    try:
        for pid in cluster_pids(pg.pid):  # backends forked from now on inherit it
            os.sched_setaffinity(pid, {0})
        with tempfile.TemporaryDirectory() as tmp:
            def ours(name, *flags):
                return serverctl.plant_store(os.path.join(tmp, name), *flags, taskset="0")

            def pg_flags(name):
                return ("--store", "postgresql", "--database-pool-size",
                        speed_bench.POOL_SIZE, "--database-url", pg.create_database(name))

            def plain_env(name, store=True):
                url = {"DATABASE_URL": pg.create_database(name)} if store else {}
                return {"TOKEN": f"bench-{name}", **url}

            granian = ("--server", "granian")
            dict_env, pg_env, wpg_env = (plain_env("plain_dict", store=False),
                                         plain_env("plain_granian"), plain_env("plain_waitress"))
            servers = {
                BASELINE: app_on_granian("bare_app:application"),
                "ours on granian, memory": on_granian(ours("gm", *granian, "--store", "memory")),
                "ours on granian, JSON file": on_granian(ours("gj", *granian)),
                "ours on granian, PostgreSQL": on_granian(ours("gp", *granian,
                                                               *pg_flags("ours_g1"))),
                "ours on granian, PostgreSQL, 2 workers": on_granian(ours(
                    "gp2", *granian, "--workers", "2", *pg_flags("ours_g2")), workers=2),
                "ours on waitress, memory": ours("wm", "--store", "memory"),
                "ours on waitress, JSON file": ours("wj"),
                "ours on waitress, PostgreSQL": ours("wp", *pg_flags("ours_w")),
                "straightforward dict, granian": app_on_granian(
                    "straightforward:create_app()", dict_env, dict_env["TOKEN"]),
                "straightforward psycopg, granian": app_on_granian(
                    "straightforward:create_app()", pg_env, pg_env["TOKEN"]),
                PLAIN_PG: plain_on_waitress(wpg_env),
            }
            with contextlib.ExitStack() as stack:
                running = {label: stack.enter_context(server)
                           for label, server in servers.items()}
                pids = [pid for *_, proc in running.values()
                        for pid in [getattr(proc, "master", proc.pid),
                                    *getattr(proc, "pids", [])]]
                started = (time.monotonic(), speed_bench.busy_cpu(),
                           speed_bench.own_cpu(pids, pg.pid))
                results = loadgen.take_turns(running, args.rounds, args.seconds,
                                             args.connections,
                                             {"pg_us": lambda: cluster_cpu(pg.pid)})
                wall = time.monotonic() - started[0]
                others = (speed_bench.busy_cpu() - started[1]
                          - (speed_bench.own_cpu(pids, pg.pid) - started[2])) / wall
    finally:
        pg.cleanup()
    print()
    ratios = loadgen.report(results, BASELINE, extra=[("pg_us", "pg us")])
    print(f"other work on the machine meanwhile: {others:.2f} of its {os.cpu_count()} CPUs")
    for label, target in (("ours on granian, memory", 0.70),
                          ("ours on granian, JSON file", 0.55)):
        verdict = "met" if ratios[label] >= target else "NOT met"
        print(f"target {label}: >= {target:.2f} of bare granian: {ratios[label]:.2f}, "
              f"{verdict}")
    plain = results[PLAIN_PG]
    for label in ("ours on granian, PostgreSQL", "ours on granian, PostgreSQL, 2 workers",
                  "ours on waitress, PostgreSQL"):
        ratio = loadgen.paired_ratio(results[label], plain, "rps")
        p99 = loadgen.paired_ratio(results[label], plain, "p99_ms")
        verdict = "met" if ratio >= 2.0 and p99 <= 1.0 else "NOT met"
        print(f"target {label}: >= 2.0x {PLAIN_PG}, p99 no worse: {ratio:.2f}x, "
              f"p99 {p99:.2f}x, {verdict}")


if __name__ == "__main__":
    main()
