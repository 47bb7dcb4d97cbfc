"""The library behaviour the adapters rely on, pinned against the installed releases: a
release that changes it fails here, naming the library (plant_store.prometheus_adapter and
plant_store.stores.postgres.pool_adapter list what is relied on)."""

import importlib.metadata
import itertools
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import psycopg_pool
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families
from psycopg_pool.base import AttemptWithBackoff

from plant_store import prometheus_adapter
from plant_store.stores.postgres import pool_adapter

POOL = f"psycopg_pool {psycopg_pool.__version__}"
PROMETHEUS = f"prometheus_client {importlib.metadata.version('prometheus_client')}"


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


WORKER = textwrap.dedent("""
    from prometheus_client import CollectorRegistry, Counter, Histogram
    registry = CollectorRegistry()
    requests = Counter("requests", "Requests.", ["status"], registry=registry)
    requests.labels("200").inc(2)
    requests.labels("503").inc()
    seconds = Histogram("seconds", "Seconds.", buckets=(0.01, 1), registry=registry)
    for amount in (0.001, 0.2, 7):
        seconds.observe(amount)
""")


def scrape(directory):
    """{(sample name, labels): value} of a scrape (families come in no set order)."""
    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry, str(directory))
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(generate_latest(registry).decode())
            for s in family.samples}


def test_a_merged_archive_is_read_as_the_workers_files_were(tmp_path):
    """Two workers' files (written by the client itself, in processes of their own) merged
    one after the other into an archive: the scrape is the same (the merge's samples are
    raw, so merging an archive again counts nothing twice)."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", WORKER], env=env, check=True)
    before = scrape(tmp_path)
    assert before[("requests_total", (("status", "200"),))] == 4, f"{PROMETHEUS}: {before}"
    assert before[("seconds_bucket", (("le", "1.0"),))] == 4, f"{PROMETHEUS}: {before}"
    for kind in ("counter", "histogram"):
        archive = tmp_path / f"{kind}_dead.db"
        for worker in sorted(tmp_path.glob(f"{kind}_[0-9]*.db")):
            merged = str(archive) + ".new"
            prometheus_adapter.merge(
                [str(path) for path in (archive, worker) if path.exists()], merged)
            os.replace(merged, archive)
            worker.unlink()
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "counter_dead.db", "histogram_dead.db"]
    assert scrape(tmp_path) == pytest.approx(before), (
        f"{PROMETHEUS}: the archive reads otherwise")

