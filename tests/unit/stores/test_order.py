"""The creation order against a plain sorted dict, through creates, deletes, undone deletes
(a failed fsync puts a deleted plant back at its old place) and the tombstone rebuilds."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plant_store.stores import order
from plant_store.stores.order import CreationOrder

ops = st.lists(st.tuples(st.sampled_from(["add", "remove", "undo"]), st.integers(0, 10**6)),
               max_size=300)


def _page_of(model, start, limit):
    return [(seq, model[seq]) for seq in sorted(model) if seq >= start][:limit + 1]


@settings(max_examples=200, deadline=None)
@given(ops=ops, start=st.integers(0, 400), limit=st.integers(1, 50))
def test_pages_match_a_sorted_dict(ops, start, limit):
    subject, model, removed = CreationOrder(), {}, []
    order.MIN_REBUILD, kept = 2, order.MIN_REBUILD  # rebuild often (not a fixture: Hypothesis)
    try:
        _apply(subject, model, removed, ops)
    finally:
        order.MIN_REBUILD = kept
    assert list(subject) == sorted(model.items())
    assert len(subject) == len(model)
    assert subject.page(start, limit) == _page_of(model, start, limit)
    assert subject.next_seq > max(model, default=-1)


def _apply(subject, model, removed, ops):
    for op, value in ops:
        if op == "add":
            seq = subject.add(value)
            assert seq not in model
            model[seq] = value
        elif op == "remove" and model:
            seq = sorted(model)[value % len(model)]
            subject.remove(seq)
            removed.append((seq, model.pop(seq)))
        elif op == "undo" and removed:
            seq, plant_id = removed.pop()
            assert subject.add(plant_id, seq) == seq
            model[seq] = plant_id


def test_built_from_a_replay_and_appended_to():
    subject = CreationOrder({7: 70, 2: 20, 5: 50}, next_seq=9)
    assert list(subject) == [(2, 20), (5, 50), (7, 70)]
    assert subject.add(1) == 9
    assert subject.page(3, 10) == [(5, 50), (7, 70), (9, 1)]


def test_tombstones_are_dropped_once_they_outnumber_the_living(monkeypatch):
    monkeypatch.setattr(order, "MIN_REBUILD", 4)
    subject = CreationOrder()
    for plant_id in range(20):
        subject.add(plant_id)
    for seq in range(10):
        subject.remove(seq)
    assert len(subject._seqs) == 20  # ten tombstones against ten living: kept
    subject.remove(10)
    assert len(subject._seqs) == 9 and not subject._dead
    assert subject.page(0, 2) == [(11, 11), (12, 12), (13, 13)]



def test_an_id_beyond_int64_changes_nothing():
    subject = CreationOrder()
    subject.add(1)
    with pytest.raises(OverflowError):
        subject.add(2**63)
    assert list(subject) == [(0, 1)] and subject.next_seq == 1


def test_an_id_beyond_int64_changes_nothing_when_appended():
    subject = CreationOrder()
    subject.append(1)
    with pytest.raises(OverflowError):
        subject.append(2**63)
    assert list(subject) == [(0, 1)] and subject.next_seq == 1


@settings(max_examples=200, deadline=None)
@given(ops=ops, start=st.integers(0, 400), limit=st.integers(1, 50))
def test_the_creates_fast_append_is_add_without_a_seq(ops, start, limit):
    """CreationOrder.append (a create's) against add(plant_id), through any deletes and undos."""
    fast, slow = CreationOrder(), CreationOrder()
    for op, value in ops:
        if op == "add":
            assert fast.append(value) == slow.add(value)
        elif op == "remove" and len(slow):
            seq = sorted(dict(slow))[value % len(slow)]
            fast.remove(seq)
            slow.remove(seq)
    assert list(fast) == list(slow) and fast.next_seq == slow.next_seq
    assert fast.page(start, limit) == slow.page(start, limit)


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["create", "retag", "remove"]),
                              st.sampled_from(["a", "b", "c"]), st.integers(0, 10**6)),
                    max_size=200))
def test_a_tags_fast_append_is_add_at_the_stores_next_seq(ops):
    """TagIndex.append (a create's, at the store's next seq) against TagIndex.add, through
    retags and deletes as the memory store makes them."""
    fast, slow = order.TagIndex(), order.TagIndex()
    tags: dict[int, str] = {}  # seq -> tag
    next_seq = 0
    for op, tag, value in ops:
        if op == "create":
            fast.append(tag, next_seq, value)
            slow.add(tag, next_seq, value)
            tags[next_seq] = tag
            next_seq += 1
        elif tags:
            seq = sorted(tags)[value % len(tags)]
            for index in (fast, slow):
                index.remove(tags[seq], seq)
                if op == "retag":
                    index.add(tag, seq, value)
            if op == "retag":
                tags[seq] = tag
            else:
                del tags[seq]
    for tag in ("a", "b", "c"):
        assert fast.page(tag, 0, 10**6) == slow.page(tag, 0, 10**6)
