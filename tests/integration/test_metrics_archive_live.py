"""The real-server half of tests/unit/metrics/test_metrics_archive.py: ended workers' metric
files merged into one archive: a scrape's text is the same after as before, and scrapes racing
the merges never count an ended worker twice or not at all."""

import logging
import types

import pytest

from plant_store.metrics import archive as metrics_archive
from support.metrics import scrape_archive, write_worker


def test_a_merge_scrapes_put_off_is_done_at_a_later_end_never_under_a_live_pid(
        tmp_path, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # before the import
    from plant_store import gunicorn_hooks

    # Its import names the master's own subdirectory; tmp_path stands for that one here.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))

    workers = {}  # gunicorn's live workers, by PID
    server = types.SimpleNamespace(WORKERS=workers, log=logging.getLogger("test"))
    for pid in (101, 102, 103):
        write_worker(tmp_path, pid)
    expected = scrape_archive(tmp_path)
    monkeypatch.setattr(metrics_archive, "LOCK_WAIT", 0.05)
    with metrics_archive.reading(str(tmp_path)):  # a long scrape
        gunicorn_hooks.child_exit(server, types.SimpleNamespace(pid=101))
    assert (tmp_path / "counter_101.db").exists()  # put off, still counted
    assert scrape_archive(tmp_path) == pytest.approx(expected)
    workers[101] = object()  # the PID, given to a new worker, must not be merged now
    gunicorn_hooks.child_exit(server, types.SimpleNamespace(pid=102))
    assert (tmp_path / "counter_101.db").exists() and not (tmp_path / "counter_102.db").exists()
    del workers[101]
    gunicorn_hooks.child_exit(server, types.SimpleNamespace(pid=101))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "counter_103.db", "counter_dead.db", "histogram_103.db", "histogram_dead.db",
        "merge.lock"]
    assert scrape_archive(tmp_path) == pytest.approx(expected)
