"""plant_store.util.at_fork: one registry of what a forked child redoes. Forking is for
tests/integration (test_prefork, test_appendlog_live) and a bare fork() to
tests/unit/stores/test_appendlog.py; here the registry's invariants,
with a fork that ran no Python hooks stood in for by another recorded process id."""

import pytest

from plant_store import logs
from plant_store.http import access_log, request_id
from plant_store.stores.jsonfile import store
from plant_store.util import at_fork


@pytest.fixture
def registry(monkeypatch):
    ran = []
    monkeypatch.setattr(at_fork, "ACTIONS", [lambda: ran.append("first"),
                                             lambda: ran.append("second")])
    return ran


def test_every_at_fork_action_of_the_package_is_in_the_one_registry():
    assert {logs._after_fork_in_child, access_log._after_fork_in_child,
            request_id._after_fork_in_child, store._forked_all} <= set(at_fork.ACTIONS)


def test_catch_up_runs_nothing_in_the_process_that_registered(registry):
    at_fork.catch_up()
    assert registry == []


def test_a_servers_hook_runs_each_action_once_in_order(registry, monkeypatch):
    monkeypatch.setattr(at_fork, "_ran_in", -1)  # as in a child uWSGI forked
    at_fork.catch_up()
    at_fork.catch_up()  # Python's hooks ran too (uWSGI's py-call-osafterfork): once
    assert registry == ["first", "second"]


def test_an_owner_tells_another_process(monkeypatch):
    owner = at_fork.Owner()
    assert not owner.forked()
    monkeypatch.setattr(owner, "pid", owner.pid + 1)  # as seen from a child
    assert owner.forked()


def test_register_returns_the_action_for_use_as_a_decorator(registry):
    def action():
        registry.append("third")

    assert at_fork.register(action) is action
    at_fork._after_fork_in_child()
    assert registry == ["first", "second", "third"]
