"""What the rate limit costs a request, in process (no server, no network): the bucket
table's ``take`` alone, on one client and on more clients than the table holds, and a whole
create through the app (memory store) with the limit off and on (a million a second: never reached),
the two taking turns so a slow spell of the machine falls on both.

    .venv/bin/python bench/rate_limit_cost.py
"""

import io
import itertools
import statistics
import sys
import time

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.http.middleware import SIZE, Buckets
from plant_store.stores import MemoryStore
from plant_store.tokens import StaticTokens

TOKEN = "bench-token"


def per_call(function, n):
    start = time.perf_counter()
    function(n)
    return (time.perf_counter() - start) / n * 1e6


def take_one_client(n):
    take = Buckets(1e9, 100).take
    for _ in range(n):
        take("203.0.113.9")


def take_many_clients(n):
    """Every call a client not in the table: the eviction path, the worst case."""
    take = Buckets(1e9, 100).take
    keys = [f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" for i in range(SIZE * 4)]
    for key in itertools.islice(itertools.cycle(keys), n):
        take(key)


def creates(rate_limit):
    app = create_app(Config(store="memory", rate_limit=rate_limit, metrics="off"),
                     store=MemoryStore(), tokens=StaticTokens({TOKEN: "bench"}),
                     log_stream=io.StringIO())
    ids = itertools.count()
    statuses = []

    def start_response(status, headers, exc_info=None):
        statuses.append(status)

    def run(n):
        for _ in range(n):
            body = b'{"id": %d, "name": "plant"}' % next(ids)
            env = {"REQUEST_METHOD": "POST", "PATH_INFO": "/plants", "SERVER_NAME": "bench",
                   "SERVER_PORT": "80", "wsgi.url_scheme": "http", "REMOTE_ADDR": "127.0.0.1",
                   "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)),
                   "HTTP_AUTHORIZATION": f"Bearer {TOKEN}", "wsgi.input": io.BytesIO(body),
                   "wsgi.errors": sys.stderr}
            b"".join(app(env, start_response))
            assert statuses.pop().startswith("200")
    return run


def main():
    best = min(per_call(take_one_client, 200_000) for _ in range(5))
    print(f"Buckets.take, one client: {best:.2f} us")
    best = min(per_call(take_many_clients, 200_000) for _ in range(5))
    print(f"Buckets.take, {SIZE * 4} clients in turn: {best:.2f} us")
    off, on = creates(0), creates(1e6)
    diffs, offs, ons = [], [], []
    for _ in range(15):
        a, b = per_call(off, 20_000), per_call(on, 20_000)
        offs.append(a)
        ons.append(b)
        diffs.append(b - a)
    print(f"create, limit off: {statistics.median(offs):.1f} us; on: "
          f"{statistics.median(ons):.1f} us; median of the pairs' differences: "
          f"{statistics.median(diffs):+.2f} us")


if __name__ == "__main__":
    main()
