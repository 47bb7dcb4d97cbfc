"""The store contract, run against every store."""

import threading

import pytest

from plant_store.stores import Conflict, JsonFileStore, Plant


def test_create_returns_the_plant_and_stores_it(store):
    assert store.create(Plant(1, "Monstera", "aroid")) == (Plant(1, "Monstera", "aroid"), True)
    assert store.get(1) == Plant(1, "Monstera", "aroid")
    assert store.get(2) is None
    assert len(store) == 1


def test_replay_is_idempotent(store):
    store.create(Plant(1, "Fern"))
    assert store.create(Plant(1, "Fern")) == (Plant(1, "Fern"), False)
    assert len(store) == 1


@pytest.mark.parametrize("other", [Plant(1, "Fern", "x"), Plant(1, "Palm"), Plant(1, "Fern", "")])
def test_conflict_leaves_the_stored_plant(store, other):
    store.create(Plant(1, "Fern"))
    with pytest.raises(Conflict) as raised:
        store.create(other)
    assert raised.value.stored == Plant(1, "Fern")
    assert store.get(1) == Plant(1, "Fern")


def test_odd_strings_are_kept_exactly(store):
    plant = Plant(-(2**63), "\x00\n\u2028 \U0001f331 e\u0301 \u05e9\u05dc\u05d5\u05dd", "\t")
    store.create(plant)
    assert store.get(plant.id) == plant


def run_threads(count, target):
    barrier = threading.Barrier(count)
    results = [None] * count

    def run(i):
        barrier.wait()
        try:
            results[i] = target(i)
        except Exception as exc:  # collected, asserted by the caller
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_racing_creates_of_one_id_have_exactly_one_winner(store):
    results = run_threads(16, lambda i: store.create(Plant(7, "Same")))
    assert sorted(created for _, created in results) == [False] * 15 + [True]
    assert len(store) == 1


def test_racing_different_plants_on_one_id_one_wins_the_rest_conflict(store):
    results = run_threads(16, lambda i: store.create(Plant(7, f"name-{i}")))
    winners = [r for r in results if isinstance(r, tuple)]
    assert len(winners) == 1 and winners[0][1] is True
    assert all(isinstance(r, Conflict) for r in results if r is not winners[0])
    assert store.get(7) == winners[0][0]


def test_many_threads_many_ids_none_lost(store):
    run_threads(16, lambda i: [store.create(Plant(i * 1000 + n, f"p{i}-{n}")) for n in range(100)])
    assert len(store) == 1600
    assert all(store.get(i * 1000 + n) == Plant(i * 1000 + n, f"p{i}-{n}")
               for i in range(16) for n in range(100))


def test_json_file_store_keeps_everything_across_reopen(tmp_path):
    plants = [Plant(i, f"plant {i}", None if i % 2 else f"tag {i}") for i in range(50)]
    with JsonFileStore(str(tmp_path)) as store:
        run_threads(10, lambda i: [store.create(p) for p in plants[i * 5:(i + 1) * 5]])
    with JsonFileStore(str(tmp_path)) as store:
        assert len(store) == 50
        assert [store.get(p.id) for p in plants] == plants
        assert store.create(plants[3]) == (plants[3], False)
        with pytest.raises(Conflict):
            store.create(Plant(3, "changed"))
    lines = (tmp_path / "plants.jsonl").read_bytes().splitlines()
    assert len(lines) == 50  # a replay writes nothing


def test_pages_walk_every_plant_once_in_creation_order(store):
    ids = [5, -3, 2**63 - 1, 0, 17, 4, 9]
    for plant_id in ids:
        store.create(Plant(plant_id, f"p{plant_id}"))
    store.create(Plant(5, "p5"))  # a replay is not a new plant
    seen, start = [], 0
    while start is not None:
        page, start = store.page(start, 3)
        assert len(page) <= 3
        seen += page
    assert seen == [Plant(i, f"p{i}") for i in ids]
    assert store.page(0, 100) == (seen, None)
    assert store.page(10**12, 5) == ([], None)


def test_json_file_store_lists_in_creation_order_after_reopen(tmp_path):
    with JsonFileStore(str(tmp_path)) as store:
        for plant_id in (3, 1, 2):
            store.create(Plant(plant_id, "x"))
    with JsonFileStore(str(tmp_path)) as store:
        assert store.page(1, 5) == ([Plant(1, "x"), Plant(2, "x")], None)


def test_delete_removes_the_plant_and_the_id_can_be_created_again(store):
    store.create(Plant(1, "Fern"))
    store.create(Plant(2, "Palm"))
    assert store.delete(1) is True
    assert store.delete(1) is False
    assert store.delete(99) is False
    assert (store.get(1), len(store)) == (None, 1)
    assert store.create(Plant(1, "Other", "new")) == (Plant(1, "Other", "new"), True)
    assert store.page(0, 10) == ([Plant(2, "Palm"), Plant(1, "Other", "new")], None)


def test_a_cursor_stays_valid_when_plants_before_and_at_it_are_deleted(store):
    for plant_id in range(6):
        store.create(Plant(plant_id, "x"))
    page, cursor = store.page(0, 2)
    assert [p.id for p in page] == [0, 1]
    store.delete(1)
    store.delete(2)  # the first plant of the next page
    page, cursor = store.page(cursor, 2)
    assert ([p.id for p in page], store.page(cursor, 2)[0]) == ([3, 4], [Plant(5, "x")])


def test_racing_deletes_of_one_id_have_exactly_one_winner(store):
    store.create(Plant(7, "Same"))
    assert sorted(run_threads(16, lambda i: store.delete(7))) == [False] * 15 + [True]


def test_racing_creates_and_deletes_keep_index_and_file_in_step(tmp_path):
    def churn(i):
        for n in range(40):
            store.delete(n)
            store.create(Plant(n, "again"))
            store.delete(n + 1000)

    with JsonFileStore(str(tmp_path)) as store:
        for n in range(40):
            store.create(Plant(n, "start"))
            store.create(Plant(n + 1000, "start"))
        assert run_threads(8, churn) == [None] * 8
        expected = store.page(0, 100)
    # Each thread's last word on an id is a create, so all 40 are there, and no 1000+ id.
    assert sorted(p.id for p in expected[0]) == list(range(40))
    assert {p.name for p in expected[0]} == {"again"}
    with JsonFileStore(str(tmp_path)) as store:
        assert store.page(0, 100) == expected


def test_json_file_store_keeps_deletes_across_reopen(tmp_path):
    with JsonFileStore(str(tmp_path)) as store:
        for plant_id in (3, 1, 2):
            store.create(Plant(plant_id, "x"))
        store.delete(1)
        store.delete(3)
        store.create(Plant(3, "again"))
    lines = (tmp_path / "plants.jsonl").read_bytes().splitlines()
    assert lines[3:] == [b'{"op":"delete","id":1}', b'{"op":"delete","id":3}',
                         b'{"op":"create","id":3,"name":"again"}']
    with JsonFileStore(str(tmp_path)) as store:
        assert store.page(0, 5) == ([Plant(2, "x"), Plant(3, "again")], None)
        assert store.get(1) is None


def test_pages_walks_the_whole_store_size_at_a_time_up_to_a_limit(store):
    for plant_id in range(7):
        store.create(Plant(plant_id, f"p{plant_id}"))
    store.delete(3)
    pages = [[p.id for p in page] for page in store.pages(2)]
    assert [plant_id for page in pages for plant_id in page] == [0, 1, 2, 4, 5, 6]
    assert all(len(page) <= 2 for page in pages)
    assert [p.id for page in store.pages(4, limit=5) for p in page] == [0, 1, 2, 4, 5]
    assert list(store.pages(3, limit=0)) == []
