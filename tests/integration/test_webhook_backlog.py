"""The webhook lanes' promises under a backlog and across instances: a dead or hung
subscriber delays only its own deliveries however many it is owed; one delivery in flight
per URL and in order, a failed one retried before any later one; at most
``webhook_max_attempts`` attempts, counted across every instance sharing the database."""

import json
import time

import psycopg
import pytest

from plant_store.config import Config
from plant_store.stores.records import Plant
from plant_store.tokens import TokenFile
from plant_store.webhooks import worker as webhooks
from support.receiver import SECRET, Receiver, Stalling
from support.servers import Server

BACKLOG = 5000


def worker_for(store, *urls, timeout=2, backoff=60.0, max_attempts=5):
    config = Config(store="memory", webhook_urls=urls, webhook_secret=SECRET,
                    webhook_backoff=backoff, webhook_timeout=timeout,
                    webhook_max_attempts=max_attempts)
    return webhooks.WebhookWorker(store, config).start()


def owe(store, url, count, request):
    """``count`` deliveries owed to ``url`` by plants 100000 on: through the store, or on
    PostgreSQL as rows (the store's own create would take a commit each)."""
    if type(store).__name__ != "PostgresStore":
        for n in range(count):
            store.create(Plant(100000 + n, "old"), (url,))
        return
    with psycopg.connect(request.getfixturevalue("database_url"), autocommit=True) as conn:
        conn.execute("""
            INSERT INTO plant_store_plants (id, name, position)
            SELECT 100000 + n, 'old', -1 - n FROM generate_series(0, %(count)s - 1) AS n
            """, {"count": count})
        conn.execute("""
            INSERT INTO plant_store_outbox (id, plant_id, url, body, owed_at)
            SELECT 'old' || n, 100000 + n, %(url)s, '{"id":0,"name":"old"}', n
            FROM generate_series(0, %(count)s - 1) AS n;
            """, {"count": count, "url": url})


@pytest.mark.slow
def test_a_backlog_to_a_hung_subscriber_does_not_hold_up_a_healthy_one(store, request):
    with Stalling() as hung, Receiver() as healthy:
        owe(store, hung.url, BACKLOG, request)
        assert store.outbox_counts() == (BACKLOG, 0)
        worker = worker_for(store, hung.url, healthy.url, timeout=2)
        try:
            started = time.monotonic()
            for plant_id in range(20):
                store.create(Plant(plant_id, "new"), (hung.url, healthy.url))
                worker.wake()
            got = healthy.wait_for(20, timeout=5)
            took = time.monotonic() - started
            assert hung.arrivals == 1  # one in flight to the hung one, the oldest it is owed
        finally:
            hung.close()
            worker.stop()
    assert [json.loads(body)["id"] for _, body in got] == list(range(20))
    assert took < 3, f"the healthy subscriber waited {took:.1f} s"


@pytest.mark.slow
def test_slow_subscribers_no_longer_configured_do_not_keep_a_healthy_one_waiting(store):
    """The worker has a thread per configured URL and two more; four URLs only the outbox
    still names (an earlier configuration), each with a backlog to a slow subscriber, share
    those with the healthy one in turns (found by the hostile pass: not delivered in 40 s)."""
    with Receiver(delay=0.3) as slow, Receiver() as healthy:
        stale = [f"{slow.url}/{n}" for n in range(4)]
        for n in range(40):
            store.create(Plant(1000 + n, "old"), stale)
        worker = worker_for(store, healthy.url)
        try:
            time.sleep(0.5)  # the stale lanes have every thread
            started = time.monotonic()
            store.create(Plant(1, "new"), (healthy.url,))
            worker.wake()
            healthy.wait_for(1, timeout=10)
            took = time.monotonic() - started
        finally:
            worker.stop()
    assert took < 2.5, f"the healthy subscriber waited {took:.1f} s"


def test_a_failed_delivery_is_retried_before_any_later_one_is_sent(store):
    with Receiver(answers=[500, 500]) as flaky:
        worker = worker_for(store, flaky.url, backoff=0.1)
        try:
            for plant_id in range(5):
                store.create(Plant(plant_id, "p"), (flaky.url,))
                worker.wake()
            flaky.wait_for(5)
        finally:
            worker.stop()
    sent = [(json.loads(body)["id"], status) for _, body, status in flaky.requests]
    assert sent == [(0, 500), (0, 500), (0, 200), (1, 200), (2, 200), (3, 200), (4, 200)]
    assert flaky.most_at_once == 1


@pytest.fixture
def instances(tmp_path, database_url):
    """Three ``plant-store serve`` instances on one database, each sending webhooks."""
    token_file = tmp_path / "tokens.json"
    token = TokenFile(str(token_file)).add("instances")
    servers = []

    def start(*urls, max_attempts=5):
        for n in range(3):
            servers.append(Server(
                tmp_path / f"i{n}", "--store", "postgresql", "--database-url", database_url,
                "--token-file", str(token_file), "--webhook-urls", ",".join(urls),
                "--webhook-secret", SECRET, "--webhook-backoff", "0.2",
                "--webhook-max-attempts", str(max_attempts)))
        return servers, token

    yield start
    for server in servers:
        server.stop()


@pytest.mark.slow
def test_three_instances_send_one_url_one_at_a_time_in_order(instances):
    with Receiver(delay=0.05) as slow:
        servers, token = instances(slow.url)
        for plant_id in range(30):  # one after another: each create's 200 before the next
            status = servers[plant_id % 3].request("POST", "/plants",
                                                   {"id": plant_id, "name": "p"}, token)[0]
            assert status == 200
        slow.wait_for(30, timeout=30)
        time.sleep(0.5)  # time for a second send of any delivery
    assert slow.most_at_once == 1
    assert [json.loads(body)["id"] for _, body, _ in slow.requests] == list(range(30))


@pytest.mark.slow
def test_attempts_across_instances_stop_at_webhook_max_attempts(instances, database_url):
    with Receiver(then=500) as failing:
        servers, token = instances(failing.url, max_attempts=3)
        for plant_id in range(4):
            status = servers[plant_id % 3].request("POST", "/plants",
                                                   {"id": plant_id, "name": "p"}, token)[0]
            assert status == 200
        deadline = time.monotonic() + 30
        with psycopg.connect(database_url, autocommit=True) as conn:
            while conn.execute("SELECT count(*) FROM plant_store_outbox WHERE dead"
                               ).fetchone()[0] < 4:
                assert time.monotonic() < deadline, str([
                    (json.loads(body)["id"], status) for _, body, status in failing.requests])
                time.sleep(0.1)
        time.sleep(1)  # time for any attempt past the maximum
    tries = [json.loads(body)["id"] for _, body, _ in failing.requests]
    assert tries == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert failing.most_at_once == 1
