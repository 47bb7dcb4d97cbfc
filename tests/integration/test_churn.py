"""Churn on a few ids with automatic compaction at its defaults: many threads creating and
deleting the same 20 ids, in the store alone and over HTTP. Every call must return, and a
restart must show exactly what the clients were told (issue 15: compaction moved the log's
offsets under writers still waiting on offsets into the old file, and they spun forever)."""

import collections
import random
import signal
import threading
import time

import pytest

from plant_store.stores import JsonFileStore
from plant_store.stores.records import Plant
from support.servers import Server

IDS = 20
THREADS = 8


def churn(do, seconds, seed):
    """Run ``do(plant_id, create)`` in THREADS threads for ``seconds``, on random ids and
    ops (half creates, half deletes); fail if any call hangs. Returns what the threads
    were told: (id, op, answer)."""
    told = [[] for _ in range(THREADS)]
    stop = time.monotonic() + seconds

    def work(n):
        rng = random.Random(seed * THREADS + n)
        while time.monotonic() < stop:
            told[n].append(do(rng.randrange(IDS), rng.random() < 0.5))

    threads = [threading.Thread(target=work, args=(n,), daemon=True) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 20)
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"{len(hung)} of {THREADS} churning threads never returned"
    return [entry for entries in told for entry in entries]


def expected_presence(told):
    """Per id, whether it must exist: creates that made a plant minus deletes that removed
    one is 0 or 1 whatever the interleaving, since the store serializes each id."""
    balance = collections.Counter()
    for plant_id, op, answer in told:
        if answer is True:
            balance[plant_id] += 1 if op == "create" else -1
    assert set(balance.values()) <= {0, 1}, balance
    return {plant_id for plant_id, n in balance.items() if n == 1}


@pytest.mark.slow
def test_store_churn_with_compaction_never_hangs_and_keeps_what_it_told(tmp_path):
    for round_ in range(4):
        data_dir = tmp_path / f"round{round_}"
        with JsonFileStore(str(data_dir)) as store:
            start_compactions = store.compactions

            def do(plant_id, create, store=store):
                if create:
                    _, created = store.create(Plant(plant_id, f"p{plant_id}"))
                    return plant_id, "create", created
                return plant_id, "delete", store.delete(plant_id)

            told = churn(do, 2.0, round_)
            present = expected_presence(told)
            assert store.compactions > start_compactions, "the churn never compacted"
            live = [plant.id for plant in store.page(0, 1000)[0]]
            assert sorted(live) == sorted(present)
        with JsonFileStore(str(data_dir)) as reopened:
            assert reopened.page(0, 1000)[0] == [Plant(i, f"p{i}") for i in live]


@pytest.mark.slow
def test_http_churn_with_compaction_health_sigterm_and_restart(tmp_path):
    data_dir = tmp_path / "data"
    server = Server(data_dir)
    try:
        token = server.first_token

        def do(plant_id, create):
            if create:
                status, _, _ = server.request("POST", "/plants",
                                              {"id": plant_id, "name": f"p{plant_id}"}, token)
                # 200 for a create and for a replay alike: read the answer as "present".
                return plant_id, "create-http", status
            status, _, _ = server.request("DELETE", f"/plants/{plant_id}", token=token)
            return plant_id, "delete-http", status

        told = []
        for round_ in range(8):  # until a compaction ran: 4 s suffice on an idle machine
            told += churn(do, 2.0, round_)
            if round_ >= 1 and "compacted" in "".join(server.stderr):
                break
        assert {status for _, _, status in told} <= {200, 204, 404}
        assert server.request("GET", "/health", timeout=5)[0] == 200
        assert "compacted" in "".join(server.stderr), "the churn never compacted"
        status, _, listed = server.request("GET", "/plants?limit=1000", token=token)
        assert status == 200
        started = time.monotonic()
        assert server.stop(signal.SIGTERM) == 0
        assert time.monotonic() - started < 5
    finally:
        server.stop()
    with Server(data_dir) as again:
        status, _, relisted = again.request("GET", "/plants?limit=1000", token=token)
        assert status == 200 and relisted == listed
