"""Ended workers' metric files merged into one archive: a scrape's text is the same after
as before, and scrapes racing the merges never count an ended worker twice or not at all."""

import threading
import time

import pytest

from plant_store.metrics import archive as metrics_archive
from support.metrics import WORKERS, scrape_archive, write_worker


def test_merging_every_ended_worker_leaves_the_scrape_as_it_was(tmp_path):
    for pid in range(100, 100 + WORKERS):
        write_worker(tmp_path, pid)
    before = scrape_archive(tmp_path)
    for pid in range(100, 100 + WORKERS - 2):  # two still live
        assert metrics_archive.merge_ended(str(tmp_path), pid)
    assert scrape_archive(tmp_path) == pytest.approx(before)  # sums added in another order
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "counter_158.db", "counter_159.db", "counter_dead.db", "histogram_158.db",
        "histogram_159.db", "histogram_dead.db", "merge.lock"]


def test_scrapes_racing_merges_count_each_ended_worker_once(tmp_path):
    for pid in range(100, 100 + WORKERS):
        write_worker(tmp_path, pid)
    expected = scrape_archive(tmp_path)
    seen, failures = [], []
    merging = threading.Event()

    def scraper():
        while not merging.is_set():
            try:
                seen.append(scrape_archive(tmp_path))
            except Exception as exc:  # e.g. a file removed between the glob and its read
                failures.append(repr(exc))
            time.sleep(0.005)

    threads = [threading.Thread(target=scraper) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        left = list(range(100, 100 + WORKERS))
        while left:  # a merge that scrapes put off is tried again, as the hooks do
            left = [pid for pid in left if not metrics_archive.merge_ended(str(tmp_path), pid)]
    finally:
        merging.set()
        for thread in threads:
            thread.join(10)
    assert not failures, failures[:3]
    assert len(seen) > WORKERS / 2  # the scrapes did overlap the merges
    wrong = [got for got in seen if got != pytest.approx(expected)]
    assert not wrong, f"{len(wrong)} of {len(seen)} scrapes differ"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "counter_dead.db", "histogram_dead.db", "merge.lock"]
