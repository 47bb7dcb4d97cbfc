"""serving/probes.py, its busy threads: the calls in flight (as granian's front records them)
counted, /ready's reason only once every thread has been busy BUSY_FOR seconds, and a call
that raises still counted out."""

import threading

import pytest

from plant_store.serving import granian_adapter, probes
from plant_store.serving.probes import BusyThreads


def test_unready_only_when_every_thread_is_held_long_enough(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(probes.time, "monotonic", lambda: now[0])
    release, entered = threading.Event(), threading.Barrier(3)

    def app(environ, start_response):
        entered.wait(5)
        release.wait(5)
        return [b""]

    busy = BusyThreads(threads=2)
    front = granian_adapter._front(app, 10, busy=busy)
    callers = [threading.Thread(target=front, args=({}, None)) for _ in range(2)]
    for caller in callers:
        caller.start()
    entered.wait(5)
    assert len(busy.started) == 2 and busy.unready() is None  # not yet a second
    now[0] += probes.BUSY_FOR
    assert "Every request thread (2)" in busy.unready()
    release.set()
    for caller in callers:
        caller.join(5)
    assert busy.started == {} and busy.unready() is None


def test_a_call_that_raises_is_counted_out():
    def app(environ, start_response):
        raise RuntimeError("boom")

    busy = BusyThreads(threads=1)
    with pytest.raises(RuntimeError):
        granian_adapter._front(app, 10, busy=busy)({}, None)
    assert busy.started == {}


def test_not_unready_while_one_thread_keeps_taking_fresh_calls(monkeypatch):
    """The hostile pass on issue 52: with three of four threads held by slow bodies, the
    fourth serving one quick call after another, /ready said "every thread busy" whenever
    it caught the fourth in a call: its call is fresh, so a thread is free within it."""
    now = [100.0]
    monkeypatch.setattr(probes.time, "monotonic", lambda: now[0])
    busy = BusyThreads(threads=4)
    busy.started.update({1: 90.0, 2: 91.0, 3: 92.0, 4: now[0] - 0.01})  # the 4th: quick
    assert busy.unready() is None
    busy.started[4] = now[0] - probes.BUSY_FOR  # held a second too: every thread is
    assert "Every request thread (4)" in busy.unready()
