"""Where a create's time goes in the app, in process (no server, no network), in
microseconds per layer, against the Falcon floor measured the same way.

The service as ``plant-store serve`` builds it (``Service``: access log at info to a null
stream, metrics on, token check), and the Falcon floor (``bare_app.falcon_floor``: one
resource whose ``on_post`` reads the body and answers fixed JSON, no middleware), each
called through the WSGI interface with a create of a ~60-byte plant. The figures are the
minimum over rounds of the CPU time of this process per create (all its threads: the
access log's flusher too), which a busy machine disturbs least; "the service's own" is
ours less the floor. cProfile's own time per function, with a C function's time given to
the layers of its callers, splits ours into layers, scaled to the measured time.

    python bench/create_profile.py                          # memory store
    python bench/create_profile.py --store jsonfile         # fsync on
    python bench/create_profile.py --tree /tmp/before       # another checkout's code
    python bench/create_profile.py --front granian          # with granian worker's front
    python bench/create_profile.py --store postgresql --database-url URL
"""

import argparse
import cProfile
import io
import itertools
import os
import pstats
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS = (  # (label, path fragments), the first that matches
    ("server front", ("plant_store/serving",)),
    ("metrics", ("plant_store/metrics", "prometheus")),
    ("access line", ("http/access_log", "plant_store/logs")),
    ("request id", ("http/request_id",)),
    ("auth (token check)", ("http/auth", "rate_limit", "plant_store/tokens")),
    ("schema (validation)", ("http/schemas", "json_fallback", "marshmallow")),
    ("resource (on_post, body)", ("http/plants", "http/etags", "http/middleware")),
    ("errors", ("http/errors",)),
    ("store", ("plant_store/stores",)),
    ("webhooks", ("plant_store/webhooks",)),
    ("falcon", ("falcon/",)),
    ("logging", ("logging/",)),
    ("psycopg", ("psycopg",)),
    ("threading, queues", ("threading", "queue")),
    ("harness (this script)", ("create_profile",)),
)


def creates(app, token):
    """A function running ``n`` creates of fresh plants through ``app``."""
    ids = itertools.count(time.time_ns())
    statuses = []

    def start_response(status, headers, exc_info=None):
        statuses.append(status)

    def run(n):
        for _ in range(n):
            plant_id = next(ids) % 2**62
            body = b'{"id": %d, "name": "plant %d", "tag": "bench"}' % (plant_id, plant_id)
            env = {"REQUEST_METHOD": "POST", "PATH_INFO": "/plants", "SERVER_NAME": "bench",
                   "SERVER_PORT": "80", "wsgi.url_scheme": "http", "REMOTE_ADDR": "127.0.0.1",
                   "SERVER_PROTOCOL": "HTTP/1.1", "CONTENT_TYPE": "application/json",
                   "CONTENT_LENGTH": str(len(body)), "HTTP_AUTHORIZATION": f"Bearer {token}",
                   "wsgi.input": io.BytesIO(body), "wsgi.errors": sys.stderr}
            b"".join(app(env, start_response))
            assert statuses.pop().startswith("200")
    return run


def timed(run, n, rounds):
    """(CPU us, wall us) per create: the minimum over ``rounds`` rounds of ``n``."""
    run(2000)  # warm
    cpu, wall = [], []
    for _ in range(rounds):
        started, used = time.perf_counter(), time.process_time()
        run(n)
        wall.append((time.perf_counter() - started) / n * 1e6)
        cpu.append((time.process_time() - used) / n * 1e6)
    return min(cpu), min(wall)


def front(app):
    """``app`` behind what granian's worker serves in front of it, in this checkout's code
    (one step since issue 52, recording its busy threads itself since its third round;
    three wrappers before, two before issue 51)."""
    from plant_store.serving import granian_adapter
    try:
        from plant_store.serving.probes import BusyThreads
    except ImportError:  # before issue 51
        from plant_store.serving.busy_threads import BusyThreads

    if hasattr(granian_adapter, "_front"):
        try:
            return granian_adapter._front(app, 1 << 20, busy=BusyThreads(16))
        except TypeError:  # before the third round: BusyThreads was a wrapper
            return granian_adapter._front(BusyThreads(app, 16), 1 << 20)
    try:
        from plant_store.serving.server_quirks import LengthRequired
    except ImportError:  # before issue 51: the app refused bodies without a length itself
        return granian_adapter._refuse_too_large(BusyThreads(app, 16), 1 << 20)
    return granian_adapter._refuse_too_large(BusyThreads(LengthRequired(app), 16), 1 << 20)


def layer(filename):
    for label, fragments in LAYERS:
        if any(fragment in filename for fragment in fragments):
            return label
    return "other (" + os.path.basename(filename) + ")"


def by_layer(stats):
    """Own seconds per layer; a built-in's (filename ``~``) go to its callers' layers."""
    layers = {}
    for (filename, _, _), (_, _, own, _, callers) in stats.stats.items():
        if filename == "~" and callers:
            total = sum(c[2] for c in callers.values()) or 1.0
            for (caller, _, _), c in callers.items():
                layers[layer(caller)] = layers.get(layer(caller), 0.0) + own * c[2] / total
        else:
            layers[layer(filename)] = layers.get(layer(filename), 0.0) + own
    return layers


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="memory")
    parser.add_argument("--database-url", default="")
    parser.add_argument("-n", type=int, default=20_000, help="creates per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tree", metavar="DIR",
                        help="measure the service from this checkout (its .venv if it has one)")
    parser.add_argument("--top", type=int, default=0, help="also cProfile's N costliest")
    parser.add_argument("--front", choices=("none", "granian"), default="none",
                        help="call the app through what granian's worker serves in front "
                             "of it (its 413 and 411, its busy threads), as the server does")
    args = parser.parse_args()
    if args.tree:
        tree = os.path.abspath(args.tree)
        python = os.path.join(tree, ".venv", "bin", "python")
        argv = [a for a in sys.argv[1:] if a not in ("--tree", args.tree)
                and not a.startswith("--tree=")]
        sys.exit(subprocess.call(
            [python if os.path.exists(python) else sys.executable, os.path.abspath(__file__),
             *argv], cwd=tree, env={**os.environ, "PYTHONPATH": tree}))

    import plant_store
    from plant_store.config import Config
    from plant_store.service import Service
    from plant_store.tokens import TokenFile

    sys.path.insert(0, HERE)
    import bare_app

    floor_cpu, floor_wall = timed(creates(bare_app.falcon_floor(), "unused"), args.n,
                                  args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        config = Config(store=args.store, data_dir=tmp, database_url=args.database_url,
                        token_file=os.path.join(tmp, "tokens.json"))
        tokens = TokenFile(config.token_file)
        token = tokens.add("bench")
        with open(os.devnull, "w") as null, Service(
                config, tokens=tokens, log_stream=null) as service:
            run = creates(front(service.app) if args.front == "granian" else service.app,
                          token)
            ours_cpu, ours_wall = timed(run, args.n, args.rounds)
            profile = cProfile.Profile()
            profile.runcall(run, args.n)
    print(f"code: {os.path.dirname(os.path.dirname(plant_store.__file__))}; "
          f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; "
          f"min of {args.rounds} rounds of {args.n} creates, CPU (wall)")
    print(f"  the Falcon floor       {floor_cpu:6.2f} us ({floor_wall:.2f})")
    shown = args.store + " store" + (", granian front" if args.front == "granian" else "")
    print(f"  ours, {shown:<16} {ours_cpu:6.2f} us ({ours_wall:.2f})")
    print(f"  the service's own      {ours_cpu - floor_cpu:6.2f} us "
          f"(ours / floor: {ours_cpu / floor_cpu:.2f})")
    stats = pstats.Stats(profile)
    layers = by_layer(stats)
    layers.pop("harness (this script)", None)
    total = sum(layers.values())
    print(f"ours by layer (cProfile's shares scaled to {ours_cpu:.2f} us):")
    for label, own in sorted(layers.items(), key=lambda item: -item[1]):
        if own / total >= 0.002:
            print(f"  {own / total * ours_cpu:6.2f} us {own / total:6.1%}  {label}")
    if args.top:
        stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
