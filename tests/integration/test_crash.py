"""kill -9 under load never loses an acknowledged create or delete, and never leaves half of
a record, while compactions run (the server compacts after every 100 records here)."""

import http.client
import itertools
import json
import random
import signal
import threading
import time
from collections import Counter

import pytest

from plant_store.stores import JsonFileStore
from plant_store.stores.records import Plant
from support.servers import Server

KILLS = 20
TIME_BUDGET = 120  # seconds; the loop fails rather than run on


def plant_for(plant_id):
    """A deterministic plant with awkward text, so a torn or mixed-up record shows."""
    name = f"plant {plant_id} \U0001f331 \u202e{'x' * (plant_id % 300)}"
    return Plant(plant_id, name, None if plant_id % 3 == 0 else f"tag\n{plant_id}")


def body_of(plant):
    body = {"id": plant.id, "name": plant.name}
    if plant.tag is not None:
        body["tag"] = plant.tag
    return json.dumps(body)


# Compaction often, so kills land in the middle of compactions too.
OFTEN_COMPACTING = ("from plant_store.stores import JsonFileStore\n"
                    "JsonFileStore.MIN_COMPACT_RECORDS = 100")


def client(server, token, ids, log, stop):
    """Create plants, and delete every even one, on one keep-alive connection until the
    server dies; ``log`` gets (what, plant) for each answer or its absence."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(method, path, body=None):
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            return response.status
        except (OSError, http.client.HTTPException):
            return None

    try:
        while not stop.is_set():
            plant = plant_for(next(ids))
            status = call("POST", "/plants", body_of(plant))
            # 503 is allowed: not reported as created
            log.append(("created" if status == 200 else "create unanswered", plant))
            if status is None:
                return
            if status == 200 and plant.id % 2 == 0:
                status = call("DELETE", f"/plants/{plant.id}")
                log.append(({204: "deleted", None: "delete unanswered", 503: "delete unanswered"}
                            .get(status, f"delete answered {status}"), plant))
                if status is None:
                    return
    finally:
        conn.close()


@pytest.mark.slow
def test_kill_9_under_load_loses_no_acknowledged_plant(tmp_path):
    start = time.monotonic()
    rng = random.Random(1234)
    ids = itertools.count()  # next() on a count is atomic under the GIL
    log, token, compacted = [], None, 0
    for _ in range(KILLS):
        assert time.monotonic() - start < TIME_BUDGET, "crash loop ran out of time"
        server = Server(tmp_path, prelude=OFTEN_COMPACTING)
        token = token or server.first_token
        stop = threading.Event()
        clients = [threading.Thread(target=client, args=(server, token, ids, log, stop))
                   for _ in range(8)]
        for thread in clients:
            thread.start()
        time.sleep(rng.uniform(0.05, 0.4))
        server.stop(signal.SIGKILL)
        stop.set()
        for thread in clients:
            thread.join(15)
        assert server.proc.returncode == -signal.SIGKILL
        compacted += sum("compacted" in line for line in server.stderr)

    outcome = {}  # plant -> the last answer about it
    for what, plant in log:
        outcome[plant] = what
    counts = Counter(outcome.values())
    print(f"{KILLS} kills: {dict(counts)}; {compacted} compactions finished")
    assert compacted > 0
    assert counts["created"] + counts["deleted"] > 100, "the load was too light to prove anything"
    assert counts["deleted"] > 50 and not [w for w in counts if w.startswith("delete answered")]
    unanswered = [plant for plant, what in outcome.items() if what == "create unanswered"]
    with JsonFileStore(str(tmp_path)) as store:
        for plant, what in outcome.items():
            expected = {"created": (plant,), "deleted": (None,)}.get(what, (None, plant))
            assert store.get(plant.id) in expected, (what, plant)  # else absent, or whole
        stored = len(store)
    assert counts["created"] <= stored <= len(outcome) - counts["deleted"]

    with Server(tmp_path) as server:
        for plant in unanswered:
            status, _, body = server.request("POST", "/plants", body_of(plant), token)
            assert status == 200, body

