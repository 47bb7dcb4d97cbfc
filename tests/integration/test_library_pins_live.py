"""The real-server half of tests/unit/test_library_pins.py: the library behaviour the adapters
rely on, pinned against the installed releases: a release that changes it fails here, naming the
library (plant_store.metrics.prometheus_adapter and plant_store.stores.postgres.pool_adapter list
what is relied on)."""

import importlib.metadata
import os
import subprocess
import sys
import textwrap

import pytest

from plant_store.metrics import prometheus_adapter
from support.metrics import scrape_directory

PROMETHEUS = f"prometheus_client {importlib.metadata.version('prometheus_client')}"


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


def test_a_merged_archive_is_read_as_the_workers_files_were(tmp_path):
    """Two workers' files (written by the client itself, in processes of their own) merged
    one after the other into an archive: the scrape is the same (the merge's samples are
    raw, so merging an archive again counts nothing twice)."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", WORKER], env=env, check=True)
    before = scrape_directory(tmp_path)
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
    assert scrape_directory(tmp_path) == pytest.approx(before), (
        f"{PROMETHEUS}: the archive reads otherwise")

