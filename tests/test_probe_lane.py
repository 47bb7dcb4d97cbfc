"""/health and /ready answer at once while every request thread waits: waitress queues
requests for its threads, and a probe must not wait its turn (plant_store.probe_lane)."""

import threading
import time

from serverproc import Server

STUCK_STORE = """
import time
from plant_store.stores.jsonfile import JsonFileStore
create = JsonFileStore.create
def stuck_create(self, plant, webhooks=()):
    time.sleep(2)  # as a create waiting on a locked table, up to database_timeout
    return create(self, plant, webhooks)
JsonFileStore.create = stuck_create
"""


def timed(server, path):
    started = time.monotonic()
    status = server.request("GET", path, timeout=10)[0]
    return status, time.monotonic() - started


def test_probes_answer_within_a_second_while_every_thread_and_the_queue_wait(tmp_path):
    with Server(tmp_path, "--threads", "2", "--url-prefix", "/api",
                prelude=STUCK_STORE) as server:
        token = server.first_token
        creates = [threading.Thread(target=server.request, args=(
            "POST", "/api/plants", {"id": n, "name": "Fern"}, token), kwargs={"timeout": 30})
            for n in range(6)]  # 2 in the threads, 4 queued behind them
        for create in creates:
            create.start()
        time.sleep(0.5)
        answers = [timed(server, path) for path in ("/api/health", "/api/ready") * 3]
        assert all(status == 200 for status, _ in answers), answers
        assert max(took for _, took in answers) < 1.0, answers
        for create in creates:
            create.join(30)
