"""kill -9 while clients update plants on the JSON-file store, again and again: after each
restart every plant is its last acknowledged version or the one in flight, whole (a torn
update leaves the version before it), in its place, in its tag's listing."""

import http.client
import json
import random
import signal
import threading
import time

import pytest

from plant_store.tokens import TokenFile
from support.servers import Server

pytestmark = pytest.mark.slow  # real servers and PostgreSQL: .ci/run runs them after the suite

PLANTS = 8
KILLS = 5


def version_of(name):
    return int(name.rsplit(" ", 1)[1])


def updater(server, token, plant_id, start, acked, stop):
    """Update one plant to version start, start+1, ... until the server dies; ``acked``
    gets each version answered 200."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    version = start
    try:
        while not stop.is_set():
            version += 1
            # a long name, so a torn line is likely when the kill lands in a write
            body = {"name": f"{'x' * (plant_id * 97 % 500)} {version}",
                    "tag": "even" if version % 2 == 0 else "odd"}
            conn.request("PUT", f"/plants/{plant_id}", json.dumps(body), headers)
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                return
            acked[plant_id] = version
    except (OSError, http.client.HTTPException):
        return
    finally:
        conn.close()


def test_kill_9_during_updates_keeps_every_acknowledged_one(tmp_path):
    token_file = tmp_path / "tokens.json"
    token = TokenFile(str(token_file)).add("t")
    args = ("--token-file", str(token_file))
    rng = random.Random(36)
    server = Server(tmp_path / "data", *args)
    for plant_id in range(PLANTS):
        body = {"id": plant_id, "name": "created 0", "tag": "even"}
        assert server.request("POST", "/plants", body, token=token)[0] == 200
    acked = dict.fromkeys(range(PLANTS), 0)
    try:
        for _ in range(KILLS):
            stop = threading.Event()
            threads = [threading.Thread(target=updater, args=(
                server, token, plant_id, acked[plant_id] + 1000, acked, stop))
                for plant_id in range(PLANTS)]
            for thread in threads:
                thread.start()
            time.sleep(rng.uniform(0.3, 1.0))
            server.proc.send_signal(signal.SIGKILL)
            stop.set()
            for thread in threads:
                thread.join(15)
            server.stop()
            server = Server(tmp_path / "data", *args)
            status, _, listing = server.request("GET", "/plants?limit=100", token=token)
            assert status == 200 and len(listing) == PLANTS
            for plant_id, plant in enumerate(listing):  # each in its place
                version = version_of(plant["name"])
                assert version in (acked[plant_id], acked[plant_id] + 1), (plant_id, version)
                assert plant["name"].startswith("x" * (plant_id * 97 % 500))
                assert plant["tag"] == ("even" if version % 2 == 0 else "odd")
                acked[plant_id] = version
            for tag in ("even", "odd"):
                _, _, tagged = server.request("GET", f"/plants?tag={tag}", token=token)
                assert [p for p in listing if p["tag"] == tag] == tagged
    finally:
        server.stop()
    assert sum(acked.values()) > PLANTS * KILLS, "too few updates were acknowledged"
