"""The outbox protocol's contract (issue 44: the store interface split into the plant
operations and the outbox protocol, each with its contract), run against every store:
here the memory and JSON-file stores, and on PostgreSQL by
tests/postgres/test_store_contract_postgresql.py."""

import orjson
import pytest

from plant_store.stores.records import Plant

A, B = "http://127.0.0.1:9/a", "http://127.0.0.1:9/b"


def test_a_create_owes_each_url_a_delivery_of_its_newplant(store):
    store.create(Plant(1, "Fern", "green"), (A, B))
    store.create(Plant(2, "Ivy"), (A,))
    owed = store.deliveries()  # oldest first; one create's, in no promised order
    assert [d.plant_id for d in owed] == [1, 1, 2]
    assert sorted((d.plant_id, d.url) for d in owed) == [(1, A), (1, B), (2, A)]
    assert orjson.loads(owed[0].body) == {"id": 1, "name": "Fern", "tag": "green"}
    assert len({d.id for d in owed}) == 3 and store.outbox_counts() == (3, 0)
    assert store.create(Plant(1, "Fern", "green"), (A, B))[1] is False  # a replay owes none
    assert store.outbox_counts() == (3, 0)


def test_lanes_name_each_url_once_and_a_lane_is_oldest_first(store):
    for plant_id in range(3):
        store.create(Plant(plant_id, "p"), (A,))
    store.create(Plant(9, "q"), (B,))
    assert sorted(store.lanes()) == [A, B]
    assert [d.plant_id for d in store.lane(A, 2)] == [0, 1]
    assert [d.plant_id for d in store.lane(B, 10)] == [9]


def test_settling_delivers_or_buries_and_a_retry_brings_dead_letters_back(store):
    store.create(Plant(1, "Fern"), (A, B))
    first, second = sorted(store.deliveries(), key=lambda d: d.url)
    store.settle(first.id, "delivered")
    store.settle(second.id, "dead", "ConnectionRefusedError")
    assert store.deliveries() == [] and store.outbox_counts() == (0, 1)
    [dead] = store.deliveries(dead=True)
    assert (dead.id, dead.dead, dead.error) == (second.id, True, "ConnectionRefusedError")
    assert store.outbox() == [dead]
    with pytest.raises(KeyError):
        store.retry_dead([second.id, "no-such-delivery"])
    assert store.outbox_counts() == (0, 1)  # all or nothing
    assert store.retry_dead() == [second.id]
    [again] = store.deliveries()
    assert (again.id, again.dead, again.attempts) == (second.id, False, 0)
    assert store.outbox_counts() == (1, 0) and store.retry_dead() == []


def test_an_unknown_delivery_cannot_be_settled(store):
    with pytest.raises(KeyError):
        store.settle("no-such-delivery", "delivered")
