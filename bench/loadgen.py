"""Load for benchmarks: keep-alive connections creating plants with fresh ids.

wrk (Debian package ``wrk``) with ``create.lua`` when it is installed, pinned to its own
core; otherwise a plain-Python client, which costs CPU the server would otherwise get. Either
way, compare figures from one run side by side, never across machines or runs.
"""

import contextlib
import http.client
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import time

LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "create.lua")


def _worker(args):
    host, port, token, seconds, threads, id_base, path = args
    import threading

    results = []

    def connection(first_id):
        conn = http.client.HTTPConnection(host, port, timeout=30)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        latencies, errors, plant_id = [], 0, first_id
        deadline = time.perf_counter() + seconds
        while (now := time.perf_counter()) < deadline:
            body = json.dumps({"id": plant_id, "name": f"plant {plant_id}", "tag": "bench"})
            conn.request("POST", path, body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            latencies.append(time.perf_counter() - now)
            errors += not 200 <= response.status < 300
            plant_id += 1
        conn.close()
        results.append((latencies, errors))

    workers = [threading.Thread(target=connection, args=(id_base + i * 10**8,))
               for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return results


def in_fresh_python(script):
    """Run ``script`` in a new interpreter, with ``rss()`` (resident bytes) defined for it;
    return the words it prints."""
    rss = f"""
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * {os.sysconf("SC_PAGE_SIZE")}
"""
    return subprocess.run([sys.executable, "-c", rss + script], capture_output=True,
                          text=True, check=True).stdout.split()


def cpu_seconds(pid):
    """User plus system CPU time of a process, all its threads, from /proc."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serving_cpu(proc):
    """CPU seconds of the processes that serve: ``proc.pids`` when it has them (a pre-fork
    server's workers), else ``proc.pid``."""
    return sum(map(cpu_seconds, getattr(proc, "pids", None) or [proc.pid]))


def interleaved(servers, rounds, seconds, connections=16, counters=None):
    """Load each of ``servers`` (label -> serverctl context, pinned to CPU 0) from CPU 1
    for ``seconds`` in turn, ``rounds`` times over, with all of them running the whole time
    (a server waiting its turn is idle). A slow spell of the shared machine then falls on
    neighbouring slices of every configuration, and ``report`` pairs each slice with the
    baseline's slice of the same round. The order turns each round, so no configuration
    always follows the same one; a first round warms every server up and is not counted.
    Besides throughput and latency, each slice records the server's CPU time per request,
    which time stolen by the machine's neighbours hardly inflates."""
    with contextlib.ExitStack() as stack:
        running = {label: stack.enter_context(server) for label, server in servers.items()}
        return take_turns(running, rounds, seconds, connections, counters)


def take_turns(running, rounds, seconds, connections=16, counters=None):
    """``interleaved``'s rounds over servers already running (label -> the tuple their
    serverctl context yielded), so that one start can serve several runs. ``counters``:
    name -> a function answering cumulative CPU seconds of something besides the server
    (a database's processes, say); each slice records its delta per request as ``name``."""
    counters = counters or {}
    results = {label: [] for label in running}
    labels = list(running)
    for turn in range(rounds + 1):
        for label in labels[turn % len(labels):] + labels[:turn % len(labels)]:
            host, port, token, proc, *path = running[label]  # a path: behind a proxy
            before = serving_cpu(proc)
            before_counters = {name: count() for name, count in counters.items()}
            result = run(host, port, token, seconds, connections, cpu=1,
                         id_base=time.time_ns() // 1000, path=path[0] if path else "/plants")
            result["cpu_us"] = (serving_cpu(proc) - before) / result["requests"] * 1e6
            for name, count in counters.items():
                result[name] = (count() - before_counters[name]) / result["requests"] * 1e6
            if turn:
                results[label].append(result)
    return results


def run(host, port, token, seconds, connections=16, id_base=0, cpu=None, path="/plants"):
    """Drive ``connections`` keep-alive clients for ``seconds``; return a summary dict."""
    if shutil.which("wrk"):
        result = run_wrk(host, port, token, seconds, connections, id_base, cpu, path)
    else:
        result = run_python(host, port, token, seconds, connections, id_base, path=path)
    return {**result, "connections": connections}


def run_wrk(host, port, token, seconds, connections, id_base, cpu, path="/plants"):
    # wrk wants at least a connection per thread
    command = ["wrk", f"-t{min(2, connections)}", f"-c{connections}", f"-d{int(seconds)}s",
               "-s", LUA, f"http://{host}:{port}{path}"]
    if cpu is not None:
        command = ["taskset", "-c", str(cpu), *command]
    env = {**os.environ, "TOKEN": token, "ID_BASE": str(id_base), "PLANTS_PATH": path}
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    summary = json.loads(out.strip().splitlines()[-1])
    return {
        "requests": summary["requests"],
        "rps": summary["requests"] / (summary["duration_us"] / 1e6),
        "p50_ms": summary["p50_us"] / 1000,
        "p99_ms": summary["p99_us"] / 1000,
        "non_2xx": summary["non_2xx"] + summary["socket_errors"],
        "tool": "wrk",
    }


def run_python(host, port, token, seconds, connections=16, id_base=0, processes=2,
               path="/plants"):
    processes = min(processes, connections)
    per_process = connections // processes
    jobs = [(host, port, token, seconds, per_process, id_base + p * 10**10, path)
            for p in range(processes)]
    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        outcomes = [r for rs in pool.map(_worker, jobs) for r in rs]
    elapsed = time.perf_counter() - started
    latencies = sorted(lat for lats, _ in outcomes for lat in lats)
    count = len(latencies)
    return {
        "requests": count,
        "rps": count / seconds,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(count * 0.99)] * 1000,
        "non_2xx": sum(errors for _, errors in outcomes),
        "wall_s": elapsed,
        "tool": "python",
    }


def paired_ratio(runs, baseline_runs, key):
    """The median over rounds of ``runs``' ``key`` over ``baseline_runs``' in the same round."""
    return statistics.median(r[key] / b[key] for r, b in zip(runs, baseline_runs, strict=True))


def report(results, baseline, extra=()):
    """Print medians of each configuration's rounds, with ratios to ``baseline``: a ratio is
    the median over rounds of the configuration's figure over the baseline's in the same
    round (paired, so a slow spell of the machine cancels out). ``extra``: (key, heading)
    of further figures of each slice (``take_turns``' counters), printed as medians."""
    def median(runs, key):
        return statistics.median(r[key] for r in runs)

    def paired(runs, key, invert=False):
        pairs = zip(runs, results[baseline], strict=True)
        return statistics.median(b[key] / r[key] if invert else r[key] / b[key]
                                 for r, b in pairs)

    rounds = len(results[baseline])
    first = results[baseline][0]
    print(f"{rounds} rounds, {first['connections']} connections ({first['tool']}); "
          "medians, ratios paired by round")
    print(f"{'configuration':<36} {'req/s':>8} {'ratio':>6} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'p99 x':>6} {'non-2xx':>7} {'cpu us':>7} {'ratio':>6}"
          + "".join(f" {heading:>7}" for _, heading in extra) + "  req/s of each round")
    for label, runs in results.items():
        line = (f"{label:<36} {median(runs, 'rps'):8.0f} {paired(runs, 'rps'):6.2f} "
                f"{median(runs, 'p50_ms'):7.2f} {median(runs, 'p99_ms'):7.2f} "
                f"{paired(runs, 'p99_ms'):6.2f} {sum(r['non_2xx'] for r in runs):7d} "
                f"{median(runs, 'cpu_us'):7.1f} {paired(runs, 'cpu_us', invert=True):6.2f}"
                + "".join(f" {median(runs, key):7.1f}" for key, _ in extra))
        print(line + "  " + " ".join(f"{r['rps']:.0f}" for r in runs))
    return {label: paired(runs, "rps") for label, runs in results.items()}
