"""The rate limit: the bucket table's arithmetic and invariants (with a clock of the test's
own, and with many threads), the middleware through the app (who a client is, what is never
limited, the answer's shape, the metrics, the document), a real server under a flood, and
the single-flight scrapes of /metrics."""

import io
import itertools
import sys
import threading
import time

import falcon.testing
import pytest
import webtest
from prometheus_client.parser import text_string_to_metric_families

from plant_store import metrics
from plant_store.app import create_app
from plant_store.config import Config
from plant_store.http.middleware import Buckets
from plant_store.metrics import for_config
from plant_store.stores import MemoryStore
from plant_store.tokens import StaticTokens
from plant_store.util.concurrency import SingleFlight
from support.assertions import assert_error
from support.openapi import DOCUMENT


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def taken(buckets, key, n):
    return sum(buckets.take(key) == 0.0 for _ in range(n))


# The bucket table.

def test_a_client_takes_burst_and_one_at_once_then_one_per_interval():
    clock = Clock()
    buckets = Buckets(rate=2, burst=3, clock=clock)
    assert taken(buckets, "a", 10) == 4
    assert buckets.take("a") == pytest.approx(0.5)  # the next one, half a second away
    clock.now += 0.4
    assert buckets.take("a") == pytest.approx(0.1)
    clock.now += 0.1
    assert taken(buckets, "a", 10) == 1
    assert taken(buckets, "b", 10) == 4  # another client's bucket is its own


def test_sustained_rate_and_refusals_take_nothing():
    clock = Clock()
    buckets = Buckets(rate=10, burst=5, clock=clock)
    served = 0
    for _ in range(10_000):  # 10 s of a client sending every millisecond
        served += buckets.take("flood") == 0.0
        clock.now += 0.001
    assert served == 6 + 100 - 1  # the burst, then 10 a second (the last one not yet due)
    clock.now += 11  # idle long enough: full again, not more
    assert taken(buckets, "flood", 100) == 6


def test_the_table_is_bounded_and_keeps_the_recently_used():
    clock = Clock()
    buckets = Buckets(rate=1, burst=0, size=3, clock=clock)
    assert taken(buckets, "kept", 1) == 1
    for n in range(1000):
        buckets.take("kept")  # refused, but used: the least recently used is another
        buckets.take(f"10.0.{n // 256}.{n % 256}")
        assert len(buckets) <= 3
    assert buckets.take("kept") > 0  # still its own empty bucket, not a fresh full one
    # An evicted client starts with a full bucket, as the docstring says.
    assert buckets.take("10.0.0.0") == 0.0


def test_many_threads_on_one_bucket_take_exactly_what_it_holds():
    buckets = Buckets(rate=0.001, burst=999, size=50, clock=Clock())  # time stands still
    counts = []

    def flood(k):
        counts.append(sum(buckets.take("one" if n % 2 else f"{k}-{n}") == 0.0 and n % 2
                          for n in range(4000)))

    threads = [threading.Thread(target=flood, args=(k,)) for k in range(16)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: inside take, if it let them
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert sum(counts) == 1000  # 32,000 tried, the bucket's 1,000 taken, not one more
    assert len(buckets) <= 50


def test_nonsense_rates_are_refused():
    for rate, burst in [(0, 1), (-1, 1), (1, -1)]:
        with pytest.raises(ValueError):
            Buckets(rate, burst)


# Through the app.

ALICE, BOB = "alice-token", "bob-token"


def make_app(proxy="", **settings):
    config = Config(store="memory", trusted_proxy=proxy, **settings)
    store = MemoryStore()
    return webtest.TestApp(create_app(config, store=store, log_stream=io.StringIO(),
                                      tokens=StaticTokens({ALICE: "alice", BOB: "bob"}),
                                      metrics=for_config(config, store)))


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def test_a_token_over_its_limit_gets_429_with_retry_after_and_another_is_served():
    app = make_app(rate_limit=0.01, rate_limit_burst=2)  # one more each 100 s
    for n in range(3):
        app.post_json("/plants", {"id": n, "name": "a"}, headers=bearer(ALICE), status=200)
    refused = app.post_json("/plants", {"id": 9, "name": "a"}, headers=bearer(ALICE),
                            status=429)
    assert "token" in assert_error(refused, 429)
    assert 99 <= int(refused.headers["Retry-After"]) <= 100
    app.get("/plants", headers=bearer(ALICE), status=429)  # every path, not creates only
    # The refused create was not stored.
    listed = app.get("/plants", headers=bearer(BOB), status=200).json
    assert [p["name"] for p in listed] == ["a"] * 3
    # Bob from the same address is another client: his token names him.
    for n in range(10, 12):
        app.post_json("/plants", {"id": n, "name": "b"}, headers=bearer(BOB), status=200)


def test_without_a_valid_token_the_address_is_the_client():
    app = make_app(rate_limit=0.01, rate_limit_burst=1)
    one = {"REMOTE_ADDR": "192.0.2.1"}
    app.get("/openapi.json", extra_environ=one, status=200)
    app.get("/", extra_environ=one, status=200)
    message = assert_error(app.get("/docs", extra_environ=one, status=429), 429)
    assert "address" in message
    app.get("/openapi.json", extra_environ={"REMOTE_ADDR": "192.0.2.2"}, status=200)
    # A token's requests from that address count against the token, not the address.
    app.get("/plants", headers=bearer(ALICE), extra_environ=one, status=200)


def test_a_request_without_a_valid_token_is_refused_401_before_the_limit_counts_it():
    # What the setting's help says: a 401 costs no more than a /health, and takes nothing
    # from its address's bucket, so the paths open without a token stay open to it.
    app = make_app(rate_limit=0.01, rate_limit_burst=1)
    one = {"REMOTE_ADDR": "192.0.2.1"}
    for _ in range(5):
        app.get("/plants", headers=bearer("no-such-token"), extra_environ=one, status=401)
        app.get("/plants", extra_environ=one, status=401)
    app.get("/openapi.json", extra_environ=one, status=200)
    app.get("/openapi.json", extra_environ=one, status=200)
    app.get("/openapi.json", extra_environ=one, status=429)


def test_behind_a_trusted_proxy_the_client_is_the_forwarded_address():
    app = make_app(proxy="10.0.0.1", rate_limit=0.01, rate_limit_burst=0)
    proxy = {"REMOTE_ADDR": "10.0.0.1"}
    for client in ("203.0.113.1", "203.0.113.2", "203.0.113.3"):
        app.get("/openapi.json", headers={"X-Forwarded-For": client}, extra_environ=proxy,
                status=200)
    app.get("/openapi.json", headers={"X-Forwarded-For": "203.0.113.1"},
            extra_environ=proxy, status=429)


def test_health_and_ready_are_never_limited():
    app = make_app(rate_limit=0.01, rate_limit_burst=0)
    app.get("/openapi.json", status=200)
    app.get("/openapi.json", status=429)
    for _ in range(50):
        app.get("/health", status=200)
        app.get("/ready", status=200)


def test_off_by_default():
    app = make_app()
    for n in range(300):
        app.post_json("/plants", {"id": n, "name": "a"}, headers=bearer(ALICE), status=200)


def test_every_operation_the_document_gives_429_is_limited_and_no_other():
    for path, item in DOCUMENT["paths"].items():
        for method, operation in item.items():
            url = path.replace("{id}", "1").replace("{name}", "docs_page.js")
            app = make_app(rate_limit=0.01, rate_limit_burst=0)  # a budget per operation
            answers = [app.request(url, method=method.upper(), body=b'{"id": 1, "name": "x"}',
                                   headers={**bearer(ALICE), "Content-Type": "application/json"},
                                   expect_errors=True) for _ in range(2)]
            assert answers[0].status_int != 429, (method, path)
            limited = answers[1].status_int == 429
            assert limited == ("429" in operation["responses"]), (method, path)
            if limited:
                assert answers[1].headers["Retry-After"].isdigit()


def test_429s_are_counted_in_the_metrics():
    app = make_app(rate_limit=0.01, rate_limit_burst=0, metrics="public")
    app.get("/plants", headers=bearer(ALICE), status=200)
    for _ in range(3):
        app.get("/plants", headers=bearer(ALICE), status=429)
    text = app.get("/metrics", extra_environ={"REMOTE_ADDR": "192.0.2.9"}).text
    found = {(s.name, s.labels.get("route"), s.labels.get("status")): s.value
             for family in text_string_to_metric_families(text) for s in family.samples}
    assert found[("plant_store_http_requests_total", "/plants", "429")] == 3
    assert found[("plant_store_http_requests_total", "/plants", "200")] == 1


# /metrics: single flight.

def test_one_computation_at_a_time_and_none_older_than_its_caller():
    ticks = itertools.count()
    running, most = [0], [0]
    lock = threading.Lock()

    def compute():
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        started = next(ticks)
        time.sleep(0.002)
        with lock:
            running[0] -= 1
        return started

    flight = SingleFlight(compute)
    stale = []
    calls = 0

    def caller():
        nonlocal calls
        for _ in range(30):
            arrived = next(ticks)
            if flight() < arrived:
                stale.append(arrived)
            with lock:
                calls += 1

    threads = [threading.Thread(target=caller) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == 480 and not stale and most[0] == 1


def test_callers_arriving_during_a_computation_share_the_next_one():
    release = threading.Event()
    count = itertools.count(1)

    def compute():
        release.wait(5)
        return next(count)

    flight = SingleFlight(compute)
    results = []
    first = threading.Thread(target=lambda: results.append(("first", flight())))
    first.start()
    deadline = time.monotonic() + 5
    while not flight._running and time.monotonic() < deadline:
        time.sleep(0.001)
    waiting = [threading.Thread(target=lambda: results.append(("later", flight())))
               for _ in range(15)]
    for thread in waiting:
        thread.start()
    while len(flight._changed._waiters) < 15 and time.monotonic() < deadline:
        time.sleep(0.001)
    release.set()
    for thread in [first, *waiting]:
        thread.join()
    assert sorted(results) == [("first", 1)] + [("later", 2)] * 15  # two computations


def test_a_failed_computation_raises_in_its_caller_and_the_waiters_go_on():
    calls = itertools.count(1)
    entered, release = threading.Event(), threading.Event()

    def compute():
        n = next(calls)
        if n == 1:
            entered.set()
            release.wait(5)
            raise RuntimeError("scrape failed")
        return n

    flight = SingleFlight(compute)
    errors, results = [], []

    def first():
        try:
            flight()
        except RuntimeError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=first)]
    threads[0].start()
    entered.wait(5)
    threads += [threading.Thread(target=lambda: results.append(flight())) for _ in range(4)]
    for thread in threads[1:]:
        thread.start()
    time.sleep(0.05)
    release.set()
    for thread in threads:
        thread.join()
    assert len(errors) == 1 and results == [2] * 4


def test_concurrent_scrapes_of_the_app_share_expositions():
    class SlowMetrics(metrics.Metrics):
        computed = 0
        running = most = 0

        def exposition(self):
            SlowMetrics.running += 1
            SlowMetrics.most = max(SlowMetrics.most, SlowMetrics.running)
            time.sleep(0.05)
            SlowMetrics.computed += 1
            SlowMetrics.running -= 1
            return super().exposition()

    store = MemoryStore()
    app = create_app(Config(store="memory", metrics="public"), store=store,
                     tokens=StaticTokens([ALICE]), metrics=SlowMetrics(store),
                     log_stream=io.StringIO())
    client = falcon.testing.TestClient(app)
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(client.get("/metrics")))
               for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [a.status_code for a in answers] == [200] * 16
    assert "plant_store_http_requests_total" in answers[0].text
    assert SlowMetrics.most == 1 and SlowMetrics.computed <= 4
