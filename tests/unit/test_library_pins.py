"""The library behaviour the adapters rely on, pinned against the installed releases: a
release that changes it fails here, naming the library (plant_store.metrics.prometheus_adapter
and plant_store.stores.postgres.pool_adapter list what is relied on)."""

import importlib.metadata
import itertools
import socket
import threading
import time

import psycopg_pool
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from psycopg_pool.base import AttemptWithBackoff

from plant_store.metrics import prometheus_adapter
from plant_store.stores.postgres import pool_adapter

POOL = f"psycopg_pool {psycopg_pool.__version__}"
CLIENT = f"prometheus_client {importlib.metadata.version('prometheus_client')}"


def test_the_reconnect_back_off_is_capped():
    capped, own = pool_adapter.Reconnect(1.0, timeout=300.0), AttemptWithBackoff(timeout=300.0)
    delays, own_delays = [], []
    for now in range(8):
        capped.update_delay(now)
        own.update_delay(now)
        delays.append(capped.delay)
        own_delays.append(own.delay)
    assert all(0.8 <= delay <= 1.0 for delay in delays), f"{POOL}: {delays}"
    assert max(own_delays) > 2, (
        f"{POOL}: its own back-off no longer grows ({own_delays}): is the cap still needed?")


def test_a_refused_connection_is_told_to_the_hook_and_retried_at_the_cap(caplog):
    failures = []  # (monotonic, error text)
    told = threading.Event()

    def failed(error):
        failures.append((time.monotonic(), error))
        if len(failures) >= 4:
            told.set()

    with socket.socket() as refusing:  # bound, not listening: connections are refused
        refusing.bind(("127.0.0.1", 0))
        port = refusing.getsockname()[1]
        conninfo = f"host=127.0.0.1 port={port} dbname=x user=x connect_timeout=1"
        others = []
        idle = pool_adapter.Pool(conninfo, name="pin", reconnect_every=0.1, min_size=1,
                                 open=False, on_failure=others.append)
        pool = pool_adapter.Pool(conninfo, name="pin", reconnect_every=0.1, min_size=1,
                                 open=False, on_failure=failed)
        try:
            pool.open(wait=False)
            assert told.wait(5), f"{POOL}: failed connections told: {failures}"
        finally:
            pool.close(timeout=1.0)
            idle.close(timeout=1.0)
    times = [at for at, _ in failures]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert max(gaps[:3]) < 0.5, f"{POOL}: retries not at the cap (0.1 s): {gaps}"
    first_line = failures[0][1].splitlines()[0]
    assert f"port {port}" in first_line and "error connecting" not in first_line, (
        f"{POOL}: the hook got {failures[0][1]!r}")
    assert others == [], f"{POOL}: another pool's failures reached this one's hook: {others}"
    printed = [r for r in caplog.records if r.name == "psycopg.pool"]
    assert printed == [], f"{POOL}: its warnings were not kept back: {printed}"


def test_a_batch_observed_through_the_histograms_attributes_equals_observe_each():
    amounts = [0.0, 0.0005, 0.0007, 0.001, 0.3, 7.5, 99.0, 0.001]
    samples = []
    for batched in (True, False):
        registry = CollectorRegistry()
        histogram = Histogram("t", "t", buckets=(0.0005, 0.001, 0.5, 10), registry=registry)
        # The attributes relied on are there: else the public fallback would hide a break.
        assert {"_upper_bounds", "_buckets", "_sum"} <= set(vars(histogram)), (
            "prometheus_client's histogram layout changed: read prometheus_adapter again")
        if batched:
            prometheus_adapter.observe_all(histogram, amounts)
        else:
            for amount in amounts:
                histogram.observe(amount)
        samples.append([(s.name, s.labels, s.value) for metric in registry.collect()
                        for s in metric.samples])
    assert samples[0] == samples[1]


def test_http_client_connects_through_create_connection():
    """webhooks/http_client_adapter.py relies on ``HTTPConnection.connect()`` opening its
    socket through ``self._create_connection`` (address, timeout, source address): a
    Python whose http.client no longer does would connect around the webhook's checks."""
    import http.client

    from plant_store.webhooks.http_client_adapter import connect_with

    called = []

    class Refused(Exception):
        pass

    def connector(address, timeout=None, source_address=None):
        called.append(address)
        raise Refused

    connection = http.client.HTTPConnection("192.0.2.1", 9, timeout=1)
    connect_with(connection, connector)
    with pytest.raises(Refused):
        connection.connect()
    assert called == [("192.0.2.1", 9)], "http.client no longer connects via _create_connection"


def test_a_process_switches_to_counting_in_files_after_the_clients_import(
        tmp_path, monkeypatch):
    """granian's forked workers: the master imported the client before naming the directory
    (prometheus_adapter.count_in_files)."""
    from prometheus_client import Counter, values

    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    with pytest.raises(ValueError, match="not set"):
        prometheus_adapter.count_in_files()
    assert values.ValueClass is values.MutexValue, f"{CLIENT}: chosen at import as before"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    try:
        prometheus_adapter.count_in_files()
        Counter("pinned", "h", registry=CollectorRegistry()).inc(3)
        registry = CollectorRegistry(auto_describe=False)
        MultiProcessCollector(registry, str(tmp_path))
        assert "pinned_total 3.0" in generate_latest(registry).decode(), CLIENT
    finally:
        values.ValueClass.close_all_files()  # type: ignore[attr-defined]
        values.ValueClass = values.MutexValue
