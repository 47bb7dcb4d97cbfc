"""The batched counting of one process (:class:`plant_store.metrics.counters._Batch`, a
request's raw fields noted, counted by label set later) against prometheus_client alone,
counting each request as it comes, on any run of requests."""

import types

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from plant_store import metrics
from plant_store.stores import MemoryStore
from support.metrics import samples

ROUTED = st.tuples(st.sampled_from(["/plants", "/plants/{plant_id}", "/health"]),
                   st.just("/plants"))
UNROUTED = st.tuples(st.none(), st.sampled_from(["/plants", "/plants/7", "/nowhere", "x",
                                                 "/docs/a.css", "/metrics"]))
REQUESTS = st.lists(st.tuples(
    st.one_of(ROUTED, UNROUTED),
    st.sampled_from(["GET", "POST", "DELETE", "BREW", "OPTIONS"]),
    st.sampled_from(["200 OK", "201 Created", "401 Unauthorized", "404 Not Found"]),
    st.one_of(st.floats(0, 30, allow_nan=False), st.sampled_from(metrics.LATENCY))),
    max_size=700)  # past _Batch.SIZE: counted mid-run as well as at the scrape


@settings(max_examples=60, deadline=None)
@given(REQUESTS)
def test_batched_counts_equal_the_clients_one_request_at_a_time(requests):
    counted = metrics.Metrics(MemoryStore())
    reference = CollectorRegistry()
    counter = Counter("plant_store_http_requests", "x", ("route", "method", "status"),
                      registry=reference)
    histogram = Histogram("plant_store_http_request_duration_seconds", "x",
                          ("route", "method"), buckets=metrics.LATENCY, registry=reference)
    for (template, path), method, status, seconds in requests:
        req = types.SimpleNamespace(uri_template=template, method=method, path=path)
        counted.request(req, types.SimpleNamespace(status=status), seconds)
        route = template if template is not None else counted._route_of(path)
        named = method if method in metrics.counters.METHODS else "OTHER"
        counter.labels(route, named, status.split()[0]).inc()
        histogram.labels(route, named).observe(seconds)
    names = ("plant_store_http_requests_total", "plant_store_http_request_duration_seconds")
    got = {k: v for k, v in samples(counted.exposition().decode()).items()
           if k[0].startswith(names)}
    want = {k: v for k, v in samples(generate_latest(reference).decode()).items()
            if k[0].startswith(names)}
    assert set(got) == set(want)
    for key, amount in want.items():
        assert abs(got[key] - amount) <= 1e-9 * max(1.0, abs(amount)), key


def test_a_scrape_waits_for_a_batch_another_thread_took_but_has_not_counted():
    """A drain and its counting are one step: a scrape that found the queue empty because a
    request's thread had just taken the batch still counts it (the review of issue 52)."""
    import threading

    from plant_store.metrics.counters import _Batch

    registry = CollectorRegistry()
    counter = Counter("c", "c", registry=registry)
    histogram = Histogram("h", "h", registry=registry)
    batch, entered, release = _Batch(), threading.Event(), threading.Event()
    batch.noted.append(("/plants", "POST", "200 OK", "/plants", 0.1))

    def slowly(*key):
        entered.set()
        release.wait(5)
        return counter, histogram

    taker = threading.Thread(target=batch.count, args=(slowly,))
    taker.start()
    assert entered.wait(5)  # the batch is taken, not yet counted
    scrape = threading.Thread(target=batch.count, args=(lambda *key: (counter, histogram),))
    scrape.start()
    scrape.join(0.2)
    assert scrape.is_alive(), "the scrape did not wait for the batch being counted"
    release.set()
    scrape.join(5)
    taker.join(5)
    assert registry.get_sample_value("c_total") == 1
