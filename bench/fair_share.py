"""Issue 34's floods on waitress and on granian: what one legitimate client gets.

Run from the repository root with the project, the granian extra and ``wrk``:

    python bench/fair_share.py                   # 3 rounds of 3 s a case, about 4 minutes

One server at a time, pinned to CPU 0, with its defaults (JSON-file store, fsync on; 16
threads), ``plant-store serve`` on waitress and ``--server granian``, each once with
``rate_limit`` off and once at 1,000 a second (burst 100: above what the legitimate client
makes alone, so only a flood is held to it; ``--limits`` to choose). The legitimate client: one
keep-alive connection creating plants of about 60 bytes one after another with a token of
its own, on CPU 1, for 3 s; alone, then during each flood, also on CPU 1 (wrk, started a
second before):

- ``openapi``: 16 connections fetching ``/openapi.json`` (no token);
- ``metrics``: 16 connections fetching ``/metrics`` with another token;
- ``creates``: 90 connections creating plants with another token (``create.lua``).

Printed: the client's creates/s (median of the rounds), its p99, and its share of what it
made alone; and the flood's own requests/s (2xx, and the rest: 429s).
"""

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import serverctl

from plant_store.tokens import TokenFile

HERE = os.path.dirname(os.path.abspath(__file__))
LUA = os.path.join(HERE, "create.lua")
FLOODS = {  # name: (connections, path, with the flood's token, wrk script)
    "alone": None,
    "openapi": (16, "/openapi.json", False, None),
    "metrics": (16, "/metrics", True, None),
    "creates": (90, "/plants", True, LUA),
}
STATUS_LUA = """
done = function(summary, latency, requests)
   io.write(string.format('{"requests": %d, "non_2xx": %d, "duration_us": %d}\\n',
      summary.requests, summary.errors.status, summary.duration))
end
"""


def flood(host, port, token, spec, seconds):
    connections, path, with_token, script = spec
    command = ["taskset", "-c", "1", "wrk", "-t2", f"-c{connections}", f"-d{seconds}s",
               f"http://{host}:{port}{path}"]
    env = {**os.environ, "TOKEN": token, "ID_BASE": str(time.time_ns() // 1000 + 10**12)}
    if with_token and script is None:
        command[4:4] = ["-H", f"Authorization: Bearer {token}"]
    if script is None:
        script = os.path.join(tempfile.gettempdir(), "fair_share_status.lua")
        with open(script, "w") as fh:
            fh.write(STATUS_LUA)
    command[4:4] = ["-s", script]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)


def legitimate(host, port, token, seconds, first_id):
    """Creates one after another on one keep-alive connection: (creates/s, p99 ms,
    statuses other than 200)."""
    conn = http.client.HTTPConnection(host, port, timeout=30)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    latencies, refused, plant_id = [], 0, first_id
    deadline = time.perf_counter() + seconds
    while (now := time.perf_counter()) < deadline:
        body = json.dumps({"id": plant_id, "name": f"plant {plant_id}", "tag": "bench"})
        try:
            conn.request("POST", "/plants", body=body, headers=headers)
            response = conn.getresponse()
            response.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=30)
            refused += 1
            continue
        if response.status == 200:
            latencies.append(time.perf_counter() - now)
        else:
            refused += 1
        plant_id += 1
    conn.close()
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99)] * 1000 if latencies else float("nan")
    return len(latencies) / seconds, p99, refused


def measure(server, rounds, seconds):
    with server as (host, port, token, data_dir):
        other = TokenFile(os.path.join(data_dir, "tokens.json")).add("flood")
        time.sleep(1.1)  # the token file is read again at most once a second
        results = {name: [] for name in FLOODS}
        for _ in range(rounds):
            for name, spec in FLOODS.items():
                load = flood(host, port, other, spec, seconds + 2) if spec else None
                if load:
                    time.sleep(1)
                rate, p99, refused = legitimate(host, port, token, seconds,
                                                time.time_ns() // 1000)
                flooded = None
                if load:
                    summary = json.loads(load.communicate()[0].strip().splitlines()[-1])
                    per_s = summary["duration_us"] / 1e6
                    flooded = ((summary["requests"] - summary["non_2xx"]) / per_s,
                               summary["non_2xx"] / per_s)
                results[name].append((rate, p99, refused, flooded))
        return results


def report(label, results):
    alone = statistics.median(r[0] for r in results["alone"])
    print(f"\n{label}")
    print(f"  {'flood':<8} {'creates/s':>9} {'share':>6} {'p99 ms':>7} {'refused':>7} "
          f"{'flood 2xx/s':>11} {'flood other/s':>13}")
    for name, runs in results.items():
        rate = statistics.median(r[0] for r in runs)
        p99 = statistics.median(r[1] for r in runs)
        refused = sum(r[2] for r in runs)
        floods = [r[3] for r in runs if r[3]]
        ok = f"{statistics.median(f[0] for f in floods):11.0f}" if floods else f"{'':>11}"
        other = f"{statistics.median(f[1] for f in floods):13.0f}" if floods else f"{'':>13}"
        print(f"  {name:<8} {rate:9.0f} {rate / alone:6.2f} {p99:7.2f} {refused:7d} {ok} {other}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limits", default="0,1000",
                        help="comma-separated rate_limit values (0: off), burst 100")
    args = parser.parse_args()
    os.sched_setaffinity(0, {1})  # the legitimate client beside wrk, off the server's CPU
    for limit in args.limits.split(","):
        for server in ("waitress", "granian"):
            with tempfile.TemporaryDirectory() as tmp:
                context = _with_dir(serverctl.plant_store(
                    tmp, "--server", server, "--rate-limit", limit, "--rate-limit-burst", "100",
                    taskset="0"), tmp)
                results = measure(context, args.rounds, args.seconds)
            report(f"{server}, rate_limit {'off' if limit == '0' else limit + '/s burst 100'}"
                   f" ({args.rounds} rounds of {args.seconds} s, medians)", results)
            sys.stdout.flush()


class _with_dir:
    """serverctl.plant_store's (host, port, token, proc) as (host, port, token, data dir)."""

    def __init__(self, server, data_dir):
        self.server, self.data_dir = server, data_dir

    def __enter__(self):
        host, port, token, _ = self.server.__enter__()
        return host, port, token, self.data_dir

    def __exit__(self, *exc_info):
        return self.server.__exit__(*exc_info)


if __name__ == "__main__":
    main()
