"""The batcher's invariants (plant_store/stores/postgres/batches.py), with races forced."""

import random
import threading
import time

import pytest

from plant_store.stores.postgres.batches import Batcher


def started(target, *args):
    result = {}

    def run():
        try:
            result["answer"] = target(*args)
        except BaseException as exc:  # the test looks at it
            result["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


def until(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


class Gated:
    """A batch function that records each batch and holds the first until released."""

    def __init__(self):
        self.batches = []
        self.gate = threading.Event()

    def __call__(self, items):
        self.batches.append(list(items))
        if len(self.batches) == 1:
            assert self.gate.wait(5)
        return [item * 10 for item in items]


def queued(batcher):
    return len(batcher._queue)


def test_a_lone_call_runs_at_once_in_its_own_thread():
    seen = []
    batcher = Batcher(lambda items: seen.append(threading.get_ident()) or items, limit=8)
    assert batcher.submit(7) == 7
    assert seen == [threading.get_ident()]


def test_calls_made_while_a_batch_runs_form_the_next_batch_in_arrival_order():
    run = Gated()
    batcher = Batcher(run, limit=8, patience=60)
    first, first_result = started(batcher.submit, 1)
    until(lambda: run.batches)
    others = []
    for n, item in enumerate((2, 3, 4), 1):
        others.append(started(batcher.submit, item))
        until(lambda n=n: queued(batcher) == n)
    run.gate.set()
    for thread, _ in [(first, first_result), *others]:
        thread.join(5)
    assert run.batches == [[1], [2, 3, 4]]
    assert first_result == {"answer": 10}
    assert [result for _, result in others] == [{"answer": 20}, {"answer": 30}, {"answer": 40}]
    assert batcher._running == 0 and queued(batcher) == 0


def test_a_batch_takes_at_most_limit_calls_and_the_rest_follow():
    run = Gated()
    batcher = Batcher(run, limit=2, patience=60)
    threads = [started(batcher.submit, 1)]
    until(lambda: run.batches)
    for item in (2, 3, 4, 5, 6):
        threads.append(started(batcher.submit, item))
        until(lambda n=item - 1: queued(batcher) == n)
    run.gate.set()
    for thread, _ in threads:
        thread.join(5)
    assert run.batches == [[1], [2, 3], [4, 5], [6]]
    assert [result["answer"] for _, result in threads] == [10, 20, 30, 40, 50, 60]


def test_each_member_gets_its_own_answer_exceptions_included():
    def run(items):
        return [ValueError(item) if item % 2 else item for item in items]

    batcher = Batcher(run, limit=8, patience=60)
    with pytest.raises(ValueError, match="3"):
        batcher.submit(3)
    assert batcher.submit(4) == 4


@pytest.mark.parametrize("failure", [RuntimeError("boom"), KeyboardInterrupt(),
                                     "wrong count"])
def test_a_batch_function_that_fails_answers_every_member_and_passes_the_lead(failure):
    gate, calls = threading.Event(), []

    def run(items):
        calls.append(list(items))
        if len(calls) == 1:
            assert gate.wait(5)
            return [0]
        if len(calls) == 2:
            if failure == "wrong count":
                return [1]
            raise failure
        return list(items)

    batcher = Batcher(run, limit=8, patience=60)
    lead = started(batcher.submit, 0)
    until(lambda: calls)
    members = []
    for n, item in enumerate((1, 2, 3), 1):
        members.append(started(batcher.submit, item))
        until(lambda n=n: queued(batcher) == n)
    gate.set()
    for thread, _ in [lead, *members]:
        thread.join(5)
        assert not thread.is_alive()
    expected = AssertionError if failure == "wrong count" else type(failure)
    assert all(isinstance(result["error"], expected) for _, result in members)
    assert batcher.submit(9) == 9  # nothing is left holding the lead
    assert batcher._running == 0


def test_several_batches_may_run_at_once():
    gate, inside = threading.Event(), []

    def run(items):
        inside.append(items)
        assert gate.wait(5)
        return items

    batcher = Batcher(run, limit=8, running=2, patience=60)
    threads = [started(batcher.submit, 1), started(batcher.submit, 2)]
    until(lambda: len(inside) == 2)  # both lead: neither waited for the other
    threads.append(started(batcher.submit, 3))
    until(lambda: queued(batcher) == 1)
    gate.set()
    for thread, _ in threads:
        thread.join(5)
    assert sorted(map(tuple, inside)) == [(1,), (2,), (3,)]


def test_churn_answers_every_call_once_with_its_own_answer():
    """Many threads, random delays in the batch function: each call gets exactly its own
    answer, batches never exceed the limit, and nothing is left queued or running."""
    sizes, rng = [], random.Random(26)

    def run(items):
        sizes.append(len(items))
        time.sleep(rng.random() / 2000)
        return [(item, "done") for item in items]

    batcher = Batcher(run, limit=5, running=2)
    answers, errors = {}, []

    def caller(n):
        for i in range(200):
            item = n * 1000 + i
            answer = batcher.submit(item)
            if answer != (item, "done"):
                errors.append((item, answer))
            answers[item] = answer

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()
    assert not errors and len(answers) == 12 * 200
    assert sum(sizes) == 12 * 200 and max(sizes) <= 5 and max(sizes) > 1
    assert batcher._running == 0 and queued(batcher) == 0


def test_a_call_that_waited_patience_leads_its_own_batch_beside_a_slow_one():
    """A slow batch (a slow commit, a lock) is not a queue every later call waits through:
    after ``patience`` a queued call leads a batch of its own, with whatever queued
    before it."""
    run = Gated()
    batcher = Batcher(run, limit=8, patience=0.05)
    first = started(batcher.submit, 1)
    until(lambda: run.batches)
    second = started(batcher.submit, 2)
    until(lambda: len(run.batches) == 2)  # did not wait for the first batch
    second[0].join(5)
    assert second[1] == {"answer": 20} and run.batches[1] == [2]
    run.gate.set()
    first[0].join(5)
    assert first[1] == {"answer": 10}
    assert batcher._running == 0 and queued(batcher) == 0


def test_impatient_calls_race_leaders_and_each_is_answered_once():
    """Patience shorter than the batches: calls time out while leaders take and hand them
    on; each call is still answered once with its own answer."""
    rng = random.Random(7)
    sizes, seen = [], []

    def run(items):
        sizes.append(len(items))
        seen.extend(items)
        time.sleep(rng.random() / 500)
        return [item * 2 for item in items]

    batcher = Batcher(run, limit=4, patience=0.0005)
    errors = []

    def caller(n):
        for i in range(150):
            item = n * 1000 + i
            if batcher.submit(item) != item * 2:
                errors.append(item)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()
    assert not errors and sorted(seen) == sorted(n * 1000 + i for n in range(10)
                                                 for i in range(150))
    assert batcher._running == 0 and queued(batcher) == 0
