"""``Store.create_many`` (issue 37), in process, for the memory and JSON-file stores
(``store``: conftest's, each in turn): a batch behaves as a create each, in order, and the
JSON file makes it one write and one fsync, durable or rolled back whole. The import in
batches (``transfer.import_lines``) stops at the same line, with the same lines before it
stored, as one create a line did. The PostgreSQL store's own is in
tests/postgres/test_bulk_import.py."""

import io

import orjson
import pytest

from plant_store.cli import plants as transfer
from plant_store.stores import BatchConflict, JsonFileStore, StoreUnavailable
from plant_store.stores.records import Plant
from support.faulty_stores import FaultyStore


def listed(store) -> list[Plant]:
    plants, start = [], 0
    while start is not None:
        page, start = store.page(start, 7)
        plants += page
    return plants


def test_a_batch_is_created_in_its_order(store):
    plants = [Plant(n * 7919 % 1000, f"plant {n}", "t" if n % 2 else None) for n in range(1000)]
    assert store.create_many(plants) == [(plant, True) for plant in plants]
    assert listed(store) == plants
    assert store.outbox_counts() == (0, 0)  # an imported plant owes no webhook delivery


def test_a_batch_is_in_the_tag_index_and_a_rolled_back_one_is_not(tmp_path):
    plants = [Plant(n, f"plant {n}", ("a", "b", None)[n % 3]) for n in range(300)]
    with FaultyStore(str(tmp_path)) as store:
        store.create_many(plants[:200])
        store.fail_fsync = True
        with pytest.raises(StoreUnavailable):
            store.create_many(plants[200:])
        store.fail_fsync = False
        assert store.page(0, 1000, tag="a")[0] == [p for p in plants[:200] if p.tag == "a"]
        store.create_many(plants)
        assert store.page(0, 1000, tag="b")[0] == [p for p in plants if p.tag == "b"]
    with JsonFileStore(str(tmp_path)) as again:  # as read back from the file
        assert again.page(0, 1000, tag="b")[0] == [p for p in plants if p.tag == "b"]


def test_stored_and_repeated_plants_are_replays(store):
    store.create(Plant(2, "two"))
    batch = [Plant(1, "one"), Plant(2, "two"), Plant(3, "three"), Plant(1, "one")]
    assert store.create_many(batch) == [(batch[0], True), (batch[1], False),
                                        (batch[2], True), (batch[3], False)]
    assert listed(store) == [Plant(2, "two"), Plant(1, "one"), Plant(3, "three")]
    assert store.create_many([]) == []


@pytest.mark.parametrize("other", [Plant(2, "Other"), Plant(2, "two", "tag")])
def test_a_conflict_stops_the_batch_there(store, other):
    store.create(other)
    batch = [Plant(1, "one"), Plant(2, "two"), Plant(3, "three")]
    with pytest.raises(BatchConflict) as raised:
        store.create_many(batch)
    assert raised.value.stored == other
    assert raised.value.done == [(batch[0], True)]
    assert listed(store) == [other, Plant(1, "one")]  # none after the conflict


def test_a_repeated_id_with_another_plant_is_a_conflict(store):
    batch = [Plant(1, "one"), Plant(2, "two"), Plant(1, "uno")]
    with pytest.raises(BatchConflict) as raised:
        store.create_many(batch)
    assert (raised.value.stored, raised.value.done) == (batch[0], [(batch[0], True),
                                                                    (batch[1], True)])
    assert listed(store) == batch[:2]


class CountingStore(FaultyStore):
    fsyncs = 0

    def _fsync_fd(self, fd):
        super()._fsync_fd(fd)
        self.fsyncs += 1


def test_a_json_file_batch_is_one_write_and_one_fsync_and_durable(tmp_path):
    plants = [Plant(n, f"plant {n}") for n in range(5000)]
    with CountingStore(str(tmp_path)) as store:
        before = store.fsyncs
        store.create_many(plants)
        assert store.fsyncs == before + 1
    with JsonFileStore(str(tmp_path)) as again:
        assert listed(again) == plants


@pytest.mark.parametrize("fault", ["fail_write", "fail_fsync"])
def test_a_failed_json_file_batch_is_rolled_back_whole(tmp_path, fault):
    plants = [Plant(n, f"plant {n}") for n in range(1, 3001)]
    with FaultyStore(str(tmp_path)) as store:
        store.create(Plant(0, "zero"))
        size = (tmp_path / "plants.jsonl").stat().st_size
        setattr(store, fault, True)
        store.partial = 1000  # a failed write first writes a part
        with pytest.raises(StoreUnavailable):
            store.create_many(plants)
        assert (len(store), listed(store)) == (1, [Plant(0, "zero")])
        assert (tmp_path / "plants.jsonl").stat().st_size == size
        setattr(store, fault, False)
        assert store.create_many(plants) == [(plant, True) for plant in plants]
    with JsonFileStore(str(tmp_path)) as again:
        assert listed(again) == [Plant(0, "zero"), *plants]


def lines(plants) -> bytes:
    return b"".join(orjson.dumps(p._asdict() if p.tag else {"id": p.id, "name": p.name},
                                 option=orjson.OPT_APPEND_NEWLINE) for p in plants)


@pytest.fixture
def small_batches(monkeypatch):
    monkeypatch.setattr(transfer, "BATCH", 4)


def test_an_import_in_batches_creates_and_replays_in_file_order(store, small_batches):
    plants = [Plant(n, f"plant {n}", "t" if n % 3 else None) for n in range(30, 0, -1)]
    store.create_many(plants[:6])
    imported = transfer.import_lines(store, io.BytesIO(lines(plants)), 1000)
    assert imported == transfer.Imported(24, 6)
    assert listed(store) == plants


@pytest.mark.parametrize("at", [1, 4, 5, 6, 11])
def test_an_import_stops_at_a_conflict_with_the_lines_before_it_stored(store, small_batches,
                                                                         at):
    plants = [Plant(n, f"plant {n}") for n in range(1, 13)]
    store.create(Plant(at, "Other"))
    with pytest.raises(transfer.TransferError, match=f"import stopped at line {at} .*: the "
                       f"store holds plant {at} with a different name or tag"):
        transfer.import_lines(store, io.BytesIO(lines(plants)), 1000)
    assert listed(store) == [Plant(at, "Other"), *plants[: at - 1]]


@pytest.mark.parametrize("at", [1, 4, 5, 6, 11])
def test_an_import_stops_at_a_bad_line_with_the_lines_before_it_stored(store, small_batches,
                                                                         at):
    data = lines(Plant(n, f"plant {n}") for n in range(1, 13)).splitlines(keepends=True)
    data[at - 1] = b'{"id": 1.5, "name": "x"}\n'
    with pytest.raises(transfer.TransferError, match=f"import stopped at line {at} "):
        transfer.import_lines(store, io.BytesIO(b"".join(data)), 1000)
    assert [p.id for p in listed(store)] == list(range(1, at))
