"""Updates through a failover: ``plant-store serve`` on a primary with a synchronous
standby (tests/support/pgcluster.py), 8 clients each updating its own plant to version 1, 2, ...
while the primary is killed and, past the requests' deadline, the standby promoted. On the
new primary each plant is at least its last version answered 200 (nothing acknowledged is
lost), and any later version
stored was answered 503 "may have been updated", never "not changed" (a 503 says not done
only when that is known)."""

import collections
import http.client
import json
import os
import threading
import time

import pytest

from plant_store.tokens import TokenFile
from support.needs import NO_POSTGRES, needed
from support.pgcluster import Cluster
from support.pgserver import find_bindir
from support.servers import Server

# Minutes each, a cluster started in a fixture: a timeout of their own (setup.cfg has 300 s).
pytestmark = [pytest.mark.topology, pytest.mark.timeout(900)]

CLIENTS = 8


def client(port, token, plant_id, answers, stop):
    version = 0
    while not stop.is_set():
        version += 1
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        try:
            conn.request("PUT", f"/plants/{plant_id}", json.dumps({"name": f"v {version}"}),
                         {"Authorization": f"Bearer {token}",
                          "Content-Type": "application/json"})
            response = conn.getresponse()
            body = response.read()
            message = json.loads(body).get("message", "") if body else ""
            answers.append((plant_id, version, response.status, message, time.monotonic()))
        except (OSError, http.client.HTTPException) as exc:
            answers.append((plant_id, version, None, str(exc), time.monotonic()))
        finally:
            conn.close()
        if answers[-1][2] != 200:
            time.sleep(0.05)


def test_updates_through_a_failover_lose_nothing_and_every_503_is_true(tmp_path):
    bindir = needed(find_bindir(), NO_POSTGRES, "postgresql package", "PostgreSQL")
    cluster = Cluster(bindir)
    server = None
    try:
        token_file = os.path.join(tmp_path, "tokens.json")
        token = TokenFile(token_file).add("failover")
        server = Server(tmp_path / "data", "--store", "postgresql", "--database-url",
                        cluster.url(), "--token-file", token_file, "--database-timeout", "1",
                        "--threads", "16")
        for plant_id in range(CLIENTS):
            assert server.request("POST", "/plants", {"id": plant_id, "name": "v 0"},
                                  token=token)[0] == 200
        answers, stop = [], threading.Event()
        threads = [threading.Thread(target=client, args=(server.port, token, n, answers, stop))
                   for n in range(CLIENTS)]
        for thread in threads:
            thread.start()
        time.sleep(1.5)
        cluster.kill_primary()
        time.sleep(2.0)  # longer than the deadline: requests in flight answer 503
        promoted = cluster.promote()
        time.sleep(3)
        stop.set()
        for thread in threads:
            thread.join(30)
        stored = {plant_id: int(bytes(name).decode().split()[1]) for plant_id, name in
                  cluster.primary.sql("SELECT id, name FROM plant_store_plants",
                                      dbname="plants")}
        statuses = {status for _, _, status, _, _ in answers}
        print("answers:", collections.Counter(
            (status, "unknown" if "may have" in message else "not done" if status == 503
             else "") for _, _, status, message, _ in answers))
        assert statuses <= {200, 503}, statuses
        for plant_id in range(CLIENTS):
            mine = [(version, status, message) for p, version, status, message, _ in answers
                    if p == plant_id]
            acked = max((v for v, status, _ in mine if status == 200), default=0)
            assert stored[plant_id] >= acked, (plant_id, stored[plant_id], acked)
            if stored[plant_id] > acked:  # its answer was not a 200: it must not say not done
                [(_, status, message)] = [m for m in mine if m[0] == stored[plant_id]]
                assert status == 503 and "may have been updated" in message, message
        assert any(status == 503 for _, _, status, _, _ in answers), "no failover was seen"
        after = [a for a in answers if a[2] == 200 and a[4] > promoted]
        assert after, "no update succeeded after the promotion"
    finally:
        if server is not None:
            server.stop()
        cluster.cleanup()
