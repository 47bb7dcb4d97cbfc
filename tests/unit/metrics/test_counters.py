"""``/metrics``: a real scrape of a real server, parsed with the Prometheus client's own
text parser, counts exactly what was sent; who may read it is a setting; gunicorn's workers
on one PostgreSQL database add up in one scrape."""

import io
import random

import pytest
import webtest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from plant_store import metrics
from plant_store.app import create_app
from plant_store.config import Config
from plant_store.metrics import StoreTimings, for_config
from plant_store.stores import JsonFileStore, MemoryStore
from plant_store.stores.records import Plant
from plant_store.tokens import TokenFile
from support.faulty_stores import FaultyStore
from support.metrics import samples, value


def test_the_default_is_behind_the_token():
    assert Config().metrics == "token"


def metered_app(tmp_path, store, timings=None, **settings):
    config = Config(data_dir=str(tmp_path / "data"), **settings)
    tokens = TokenFile(str(tmp_path / "tokens.json"), recheck=0)
    token = tokens.add("t")
    return webtest.TestApp(create_app(config, store=store, tokens=tokens, log_stream=io.StringIO(),
                                      metrics=for_config(config, store, timings=timings)),
                           extra_environ={"HTTP_AUTHORIZATION": f"Bearer {token}"})


def test_a_failed_fsync_is_a_503_counted_by_its_cause(tmp_path):
    with FaultyStore(str(tmp_path / "data")) as store:
        app = metered_app(tmp_path, store)
        store.fail_fsync = True
        app.post_json("/plants", {"id": 1, "name": "a"}, status=503)
        store.fail_fsync = False
        store.fail_write = True
        app.post_json("/plants", {"id": 2, "name": "b"}, status=503)
        got = samples(app.get("/metrics").text)
    unavailable = "plant_store_store_unavailable_total"
    assert value(got, unavailable, operation="create", cause="fsync") == 1
    assert value(got, unavailable, operation="create", cause="io") == 1


def test_compactions_are_counted_and_timed(tmp_path):
    timings = StoreTimings()  # given to the store as it opens: no callback set afterwards
    with JsonFileStore(str(tmp_path / "data"), events=timings) as store:
        app = metered_app(tmp_path, store, timings)
        for i in range(10):
            store.create(Plant(i, "x"))
            store.delete(i)
        store.compact()
        got = samples(app.get("/metrics").text)
    assert value(got, "plant_store_compaction_duration_seconds_count") == 1
    assert value(got, "plant_store_compaction_duration_seconds_sum") > 0


def test_batched_counting_gives_what_the_client_counts_one_request_at_a_time():
    rng = random.Random(7)
    samples = [rng.choice([rng.expovariate(300), rng.uniform(0, 20)]) for _ in range(1970)]
    # Each bucket's bound itself (an amount equal to it is in it), zero, one past the last.
    samples += [*metrics.LATENCY, *metrics.LATENCY, 0.0, 100.0]
    rng.shuffle(samples)
    reference = CollectorRegistry()
    one_by_one = Histogram("plant_store_http_request_duration_seconds", "x",
                           ("route", "method"), buckets=metrics.LATENCY, registry=reference)
    counted = metrics.Metrics(MemoryStore())
    waiting = []  # as an access log hands them on: every 256, and the rest at the scrape
    counted.drain_before_scrape(lambda: (counted.requests(waiting[:]), waiting.clear()))
    for seconds in samples:
        one_by_one.labels("/plants", "POST").observe(seconds)
        waiting.append((0.0, "127.0.0.1", "POST", "", "/plants", "200 OK", seconds, "id",
                        "/plants"))
        if len(waiting) == 256:
            counted.requests(waiting[:])
            waiting.clear()

    def histogram(registry_text):
        return {(s.name, s.labels.get("le")): s.value
                for family in text_string_to_metric_families(registry_text)
                if family.name == "plant_store_http_request_duration_seconds"
                for s in family.samples}

    got = histogram(counted.exposition().decode())
    assert got == pytest.approx(histogram(generate_latest(reference).decode()))
    assert got[("plant_store_http_request_duration_seconds_count", None)] == 2000
    requests = next(f for f in text_string_to_metric_families(counted.exposition().decode())
                    if f.name == "plant_store_http_requests")
    assert [s.value for s in requests.samples if s.name.endswith("_total")] == [2000]




@pytest.mark.parametrize("url_prefix", ["", "/api"])
def test_requests_the_server_refused_are_counted_under_the_route_the_app_would_name(
        url_prefix):
    """Waitress's and granian's own refusals (a 413 before the app): under ``url_prefix``
    the path still carries the prefix, which the hostile pass on issue 52 found counted as
    ``unmatched`` while the app counted its own 401 there as ``/plants``."""
    counted = for_config(Config(url_prefix=url_prefix), MemoryStore())
    counted.refused_by_server("POST", f"{url_prefix}/plants", 413)
    counted.refused_by_server("BREW", f"{url_prefix}/plants/7", 413)  # a method of its own
    counted.refused_by_server("POST", "/elsewhere", 400)
    scraped = samples(counted.exposition().decode())
    total = "plant_store_http_requests_total"
    assert value(scraped, total, route="/plants", method="POST", status="413") == 1
    assert value(scraped, total, route="/plants/{plant_id}", method="OTHER", status="413") == 1
    assert value(scraped, total, route="unmatched", method="POST", status="400") == 1
