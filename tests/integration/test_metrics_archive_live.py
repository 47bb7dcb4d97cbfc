"""Ended workers' metric files merged into one archive: a scrape's text is the same after
as before, and scrapes racing the merges never count an ended worker twice or not at all."""

import logging
import types

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from plant_store.serving import metrics_archive

WORKERS = 60


def write_worker(directory, pid):
    """The files a worker leaves: a counter over two label sets, a histogram's buckets and
    sum (keys as the client writes them)."""
    counter = MmapedDict(str(directory / f"counter_{pid}.db"))
    for status in ("200", "503"):
        counter.write_value(mmap_key("requests", "requests_total", ["status"], [status], "h"),
                            pid % 7 + 1, 0.0)
    counter.close()
    histogram = MmapedDict(str(directory / f"histogram_{pid}.db"))
    for le in ("0.1", "1.0", "+Inf"):
        histogram.write_value(mmap_key("seconds", "seconds_bucket", ["le"], [le], "h"),
                              pid % 3, 0.0)
    histogram.write_value(mmap_key("seconds", "seconds_sum", [], [], "h"), pid / 10, 0.0)
    histogram.close()


def scrape(directory):
    """{(sample name, labels): value} of a scrape."""
    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry, str(directory))
    with metrics_archive.reading(str(directory)):
        text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_merge_scrapes_put_off_is_done_at_a_later_end_never_under_a_live_pid(
        tmp_path, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # before the import
    from plant_store import gunicorn_hooks

    workers = {}  # gunicorn's live workers, by PID
    server = types.SimpleNamespace(WORKERS=workers, log=logging.getLogger("test"))
    for pid in (101, 102, 103):
        write_worker(tmp_path, pid)
    expected = scrape(tmp_path)
    monkeypatch.setattr(metrics_archive, "LOCK_WAIT", 0.05)
    with metrics_archive.reading(str(tmp_path)):  # a long scrape
        gunicorn_hooks.child_exit(server, types.SimpleNamespace(pid=101))
    assert (tmp_path / "counter_101.db").exists()  # put off, still counted
    assert scrape(tmp_path) == pytest.approx(expected)
    workers[101] = object()  # the PID, given to a new worker, must not be merged now
    gunicorn_hooks.child_exit(server, types.SimpleNamespace(pid=102))
    assert (tmp_path / "counter_101.db").exists() and not (tmp_path / "counter_102.db").exists()
    del workers[101]
    gunicorn_hooks.child_exit(server, types.SimpleNamespace(pid=101))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "counter_103.db", "counter_dead.db", "histogram_103.db", "histogram_dead.db",
        "merge.lock"]
    assert scrape(tmp_path) == pytest.approx(expected)
