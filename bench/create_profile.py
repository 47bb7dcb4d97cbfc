"""Where a create's time goes in the app, in process (no server, no network): the service
as ``plant-store serve`` builds it (``Service``: access log at info to a null stream,
metrics on, token check), a create of a ~60-byte plant called through the WSGI interface,
timed, then profiled with cProfile and its own time summed by layer (the module each
function lives in).

    python bench/create_profile.py                          # memory store
    python bench/create_profile.py --store jsonfile         # fsync on
    python bench/create_profile.py --store postgresql --database-url URL
"""

import argparse
import cProfile
import io
import itertools
import os
import pstats
import sys
import tempfile
import time

from plant_store.config import Config
from plant_store.service import Service
from plant_store.tokens import TokenFile

LAYERS = (  # (label, path fragment), the first that matches
    ("metrics (plant_store.metrics, prometheus_client)", ("plant_store/metrics",
                                                          "prometheus")),
    ("access log, request id", ("access_log", "request_id", "plant_store/logs")),
    ("token check, rate limit", ("http/auth", "rate_limit", "plant_store/tokens")),
    ("resource, schemas, errors", ("http/plants", "http/schemas", "http/errors",
                                   "http/middleware", "http/etags", "json_fallback")),
    ("store", ("plant_store/stores",)),
    ("webhooks", ("plant_store/webhooks",)),
    ("falcon", ("falcon/",)),
    ("logging", ("logging/",)),
    ("psycopg", ("psycopg",)),
    ("threading, queues", ("threading", "queue")),
)


def creates(app, token):
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


def layer(filename):
    for label, fragments in LAYERS:
        if any(fragment in filename for fragment in fragments):
            return label
    return "other (" + os.path.basename(filename) + ")"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="memory")
    parser.add_argument("--database-url", default="")
    parser.add_argument("-n", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = Config(store=args.store, data_dir=tmp, database_url=args.database_url,
                        token_file=os.path.join(tmp, "tokens.json"))
        tokens = TokenFile(config.token_file)
        token = tokens.add("bench")
        with open(os.devnull, "w") as null, Service(
                config, tokens=tokens, log_stream=null) as service:
            run = creates(service.app, token)
            run(2000)  # warm
            times, cpu = [], []
            for _ in range(5):
                started, used = time.perf_counter(), time.process_time()
                run(args.n)
                times.append((time.perf_counter() - started) / args.n * 1e6)
                cpu.append((time.process_time() - used) / args.n * 1e6)
            print(f"{args.store}: {sorted(times)[2]:.1f} us a create, {sorted(cpu)[2]:.1f} us "
                  f"of this process's CPU (all its threads; medians of 5 x {args.n})")
            profile = cProfile.Profile()
            profile.runcall(run, args.n)
    stats = pstats.Stats(profile)
    by_layer = {}
    total = 0.0
    for (filename, _, _), (_, _, own, _, _) in stats.stats.items():
        by_layer[layer(filename)] = by_layer.get(layer(filename), 0.0) + own
        total += own
    print(f"cProfile, own time by layer ({total / args.n * 1e6:.1f} us a create under the "
          "profiler):")
    for label, own in sorted(by_layer.items(), key=lambda item: -item[1])[:14]:
        print(f"  {own / total:6.1%}  {label}")
    stats.sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
