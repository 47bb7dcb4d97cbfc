"""serving/probes.py, its busy threads: the calls in flight counted, /ready's reason only once every
thread has been busy BUSY_FOR seconds, and a call that raises still counted out."""

import threading

import pytest

from plant_store.serving import probes
from plant_store.serving.probes import BusyThreads


def test_unready_only_when_every_thread_is_held_long_enough(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(probes.time, "monotonic", lambda: now[0])
    release, entered = threading.Event(), threading.Barrier(3)

    def app(environ, start_response):
        entered.wait(5)
        release.wait(5)
        return [b""]

    busy = BusyThreads(app, threads=2)
    callers = [threading.Thread(target=busy, args=({}, None)) for _ in range(2)]
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

    busy = BusyThreads(app, threads=1)
    with pytest.raises(RuntimeError):
        busy({}, None)
    assert busy.started == {}
