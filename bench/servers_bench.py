"""The service on granian and on waitress against bare granian, side by side in one run.

Run from the repository root with the project and the granian extra installed:

    python bench/servers_bench.py                  # 5 rounds of 3 s, about 2 minutes

Five servers, each pinned to CPU 0 (taskset; granian's worker process inherits it) with
the load on CPU 1: a bare WSGI callable on granian (``bare_granian.py``, the ceiling), the
service on granian with the memory store and with the JSON-file store (fsync on), the
service on waitress with the same two stores. The load is 16 keep-alive connections
creating 60-byte plants with a bearer token (``create.lua`` with wrk, else a Python
client); ``loadgen.report`` prints median creates/s, p50/p99 and the CPU time per create
of the process that serves (granian's worker, not its master), each paired by round
against bare granian. Targets: memory store on granian >= 0.70 of bare granian, JSON file
on granian >= 0.55.
"""

import argparse
import contextlib
import os
import sys
import tempfile
import time

import loadgen
import serverctl

HERE = os.path.dirname(os.path.abspath(__file__))


class _Worker:
    """The granian worker process of a running master: the one whose CPU time counts."""

    def __init__(self, master_pid):
        deadline = time.monotonic() + 10
        while True:
            children = []
            for task in os.listdir(f"/proc/{master_pid}/task"):
                with open(f"/proc/{master_pid}/task/{task}/children") as fh:
                    children += fh.read().split()
            if children:
                self.pid = int(children[0])
                return
            if time.monotonic() > deadline:
                raise RuntimeError("no granian worker process")
            time.sleep(0.05)


@contextlib.contextmanager
def on_granian(server):
    """``server`` (a serverctl context) with the worker's PID in place of the master's."""
    with server as (host, port, token, proc):
        yield host, port, token, _Worker(proc.pid)


@contextlib.contextmanager
def bare_granian():
    command = [sys.executable, os.path.join(HERE, "bare_granian.py")]
    with serverctl.running(command, taskset="0", cwd=HERE) as (host, port, proc):
        yield host, port, "unused", proc


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=3, help="length of each load run")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds; medians and paired ratios are reported")
    args = parser.parse_args()
    granian = ("--server", "granian")
    with tempfile.TemporaryDirectory() as tmp:
        servers = {
            "bare WSGI on granian (ceiling)": on_granian(bare_granian()),
            "service on granian, memory": on_granian(serverctl.plant_store(
                os.path.join(tmp, "gm"), *granian, "--store", "memory", taskset="0")),
            "service on granian, JSON file": on_granian(serverctl.plant_store(
                os.path.join(tmp, "gj"), *granian, taskset="0")),
            "service on waitress, memory": serverctl.plant_store(
                os.path.join(tmp, "wm"), "--store", "memory", taskset="0"),
            "service on waitress, JSON file": serverctl.plant_store(
                os.path.join(tmp, "wj"), taskset="0"),
        }
        results = loadgen.interleaved(servers, args.rounds, args.seconds)
    ratios = loadgen.report(results, baseline="bare WSGI on granian (ceiling)")
    for label, target in (("service on granian, memory", 0.70),
                          ("service on granian, JSON file", 0.55)):
        verdict = "met" if ratios[label] >= target else "NOT met"
        print(f"target {label}: >= {target:.2f} of bare granian: {ratios[label]:.2f}, {verdict}")


if __name__ == "__main__":
    main()
