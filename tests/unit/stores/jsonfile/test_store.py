"""Write faults in the JSON-file store: 503, no half plant, and recovery once space is back."""

import errno
import threading

import pytest

from plant_store.stores import JsonFileStore, StoreError, StoreUnavailable
from plant_store.stores.records import Plant
from support.faulty_stores import FaultyStore
from support.journals import records


@pytest.fixture
def faulty(tmp_path):
    store = FaultyStore(str(tmp_path))
    store.create(Plant(1, "before"))
    yield store
    store.close()


def lines(tmp_path):
    return records(tmp_path)


@pytest.mark.parametrize("partial", [0, 5])
def test_failed_write_is_unavailable_and_leaves_whole_records(faulty, tmp_path, partial):
    faulty.fail_write, faulty.partial = True, partial
    with pytest.raises(StoreUnavailable):
        faulty.create(Plant(2, "during"))
    assert faulty.get(2) is None
    assert len(lines(tmp_path)) == 1
    faulty.fail_write = False
    assert faulty.create(Plant(2, "after")) == (Plant(2, "after"), True)
    assert len(lines(tmp_path)) == 2


def test_failed_fsync_rolls_back_the_line_and_the_index(faulty, tmp_path):
    faulty.fail_fsync = True
    with pytest.raises(StoreUnavailable):
        faulty.create(Plant(2, "during"))
    assert faulty.get(2) is None
    assert len(lines(tmp_path)) == 1
    faulty.fail_fsync = False
    faulty.create(Plant(2, "after"))
    faulty.close()
    with JsonFileStore(str(tmp_path)) as reopened:
        assert reopened.get(1) == Plant(1, "before")
        assert reopened.get(2) == Plant(2, "after")


def test_failed_fsync_fails_every_request_it_covered(tmp_path):
    """Threads that appended during a failing fsync all get the error, none a false 200."""
    store = FaultyStore(str(tmp_path))
    gate = threading.Event()
    original = store._fsync_fd

    def slow_failing_fsync(fd):
        gate.wait(5)
        raise OSError(errno.EIO, "Input/output error")

    store._fsync_fd = slow_failing_fsync
    outcomes = {}

    def create(i):
        try:
            outcomes[i] = store.create(Plant(i, f"p{i}"))
        except StoreUnavailable as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    gate.set()
    for thread in threads:
        thread.join()
    store._fsync_fd = original
    assert len(outcomes) == 8
    assert all(isinstance(outcome, StoreUnavailable) for outcome in outcomes.values())
    assert len(store) == 0
    assert (tmp_path / "plants.jsonl").read_bytes() == b""
    store.create(Plant(9, "after"))
    store.close()
    with JsonFileStore(str(tmp_path)) as reopened:
        assert len(reopened) == 1 and reopened.get(9) == Plant(9, "after")


def test_second_store_on_the_same_directory_is_refused(tmp_path):
    in_use = f"this process already has {tmp_path} open"  # in another, "in use by" its PID
    with JsonFileStore(str(tmp_path)), pytest.raises(StoreError, match=in_use):
        JsonFileStore(str(tmp_path))
    JsonFileStore(str(tmp_path)).close()  # released on close


def test_a_rolled_back_create_is_never_listed(faulty):
    faulty.fail_fsync = True
    with pytest.raises(StoreUnavailable):
        faulty.create(Plant(2, "during"))
    assert faulty.page(0, 10) == ([Plant(1, "before")], None)
    faulty.fail_fsync = False
    faulty.create(Plant(3, "after"))
    assert faulty.page(0, 10) == ([Plant(1, "before"), Plant(3, "after")], None)


def test_a_create_is_listed_only_once_durable(tmp_path):
    class SlowFsync(JsonFileStore):
        armed = False

        def _fsync_fd(self, fd):
            if self.armed:
                entered.set()
                release.wait(5)
            JsonFileStore._fsync_fd(fd)

    entered, release = threading.Event(), threading.Event()
    store = SlowFsync(str(tmp_path))
    store.armed = True
    try:
        creating = threading.Thread(target=store.create, args=(Plant(1, "pending"),))
        creating.start()
        assert entered.wait(5)
        pages = []
        listing = threading.Thread(target=lambda: pages.append(store.page(0, 10)))
        listing.start()
        listing.join(0.2)
        assert pages == []  # appended, not yet durable: the page waits for its fsync
        release.set()
        creating.join(5)
        listing.join(5)
        assert pages == [([Plant(1, "pending")], None)]
    finally:
        release.set()
        store.close()
