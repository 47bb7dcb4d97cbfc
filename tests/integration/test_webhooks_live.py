"""The real-server half of tests/unit/webhooks/test_worker.py: the new-plant webhook:
deliveries signed the Standard Webhooks way (checked with the official standardwebhooks library,
as a receiver would) from a durable outbox, retried with back-off, dead letters, restart and
kill -9 survival, and a clean stop; against a real receiver."""

import json
import signal
import time
from urllib.parse import urlsplit

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from plant_store.config import Config
from plant_store.stores import JsonFileStore
from plant_store.stores.records import Plant
from plant_store.webhooks import worker as webhooks
from support.receiver import SECRET, Receiver, serve_flags, verified
from support.servers import Server, free_port, run_cli


def settings(receiver_url, **overrides):
    return Config(store="memory", webhook_urls=(receiver_url,), webhook_secret=SECRET,
                  webhook_backoff=0.05, webhook_timeout=2, **overrides)


def test_retries_until_the_receiver_accepts_then_settles(tmp_path):
    with Receiver(answers=[500, 503]) as receiver:
        store = JsonFileStore(str(tmp_path))
        worker = webhooks.WebhookWorker(store, settings(receiver.url)).start()
        try:
            plant = Plant(7, "Fern \U0001f331", "green")
            store.create(plant, (receiver.url,))
            worker.wake()
            receiver.wait_for(1)
            deadline = time.monotonic() + 5
            while store.deliveries() and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            worker.stop()
            store.close()
    assert [status for _, _, status in receiver.requests] == [500, 503, 200]
    ids = {headers["webhook-id"] for headers, _, _ in receiver.requests}
    assert len(ids) == 1  # the same delivery id on every try: receivers dedupe on it
    for headers, body, _ in receiver.requests:
        assert headers["Content-Type"] == "application/json"
        assert verified(headers, body)
        assert json.loads(body) == {"id": 7, "name": "Fern \U0001f331", "tag": "green"}
    with JsonFileStore(str(tmp_path)) as store:
        assert store.deliveries() == [] and store.deliveries(dead=True) == []


@pytest.mark.slow
def test_each_attempt_is_signed_and_an_altered_or_old_delivery_is_refused(tmp_path):
    """A real server's delivery, failed once then retried, checked as a receiver would: the
    retry keeps the delivery's webhook-id with its own timestamp and signature."""
    # The first retry waits 1 to 2 s, so it is signed in a later second.
    with (Receiver(answers=[500]) as receiver,
          Server(tmp_path / "data", *serve_flags(receiver.url, backoff=2)) as server):
        before = int(time.time())
        status, _, _ = server.request("POST", "/plants", {"id": 4, "name": "Fern"},
                                      token=server.first_token)
        assert status == 200
        receiver.wait_for(1, timeout=10)
        after = time.time()
    (first, _, failed), (retry, body, answered) = receiver.requests
    assert (failed, answered) == (500, 200)
    assert json.loads(body) == {"id": 4, "name": "Fern"}
    assert retry["Content-Type"] == "application/json"
    assert retry["webhook-id"] == first["webhook-id"]
    assert before <= int(first["webhook-timestamp"]) < int(retry["webhook-timestamp"]) <= after
    assert retry["webhook-signature"] != first["webhook-signature"]
    assert verified(first, body) and verified(retry, body)

    assert not verified(retry, body.replace(b"Fern", b"Fake"))
    assert not verified({**retry, "webhook-id": "another"}, body)
    moved = str(int(retry["webhook-timestamp"]) + 1)
    assert not verified({**retry, "webhook-timestamp": moved}, body)
    assert not verified(retry, body, secret=webhooks.new_secret())
    assert not verified({**retry, "webhook-signature": "garbage"}, body)

    # The same delivery as the server signed it more than the verifier's 5 minutes ago,
    # replayed now: refused for its age alone (signed now, it passes).
    signer = Webhook(SECRET)
    delivery_id = retry["webhook-id"]
    replayed = webhooks.signed(signer, delivery_id, body, int(time.time()) - 5 * 60 - 1)
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(SECRET).verify(body, replayed)
    assert verified(webhooks.signed(signer, delivery_id, body, int(time.time())), body)


@pytest.mark.slow
def test_dead_letters_are_listed_and_retried_by_the_command(tmp_path):
    data = tmp_path / "data"
    with Receiver(then=500) as receiver:
        with Server(data, *serve_flags(receiver.url, attempts=3)) as server:
            status, _, _ = server.request("POST", "/plants", {"id": 1, "name": "Fern"},
                                          token=server.first_token)
            assert status == 200
            receiver.wait_for(3, delivered=False)
            time.sleep(0.2)
            assert server.stop() == 0
        assert len(receiver.requests) == 3  # max attempts, then no more
    log = "".join(server.stderr)
    assert "kept as a dead letter" in log

    listed = run_cli("webhooks", "list", "--data-dir", str(data))
    assert listed.returncode == 0, listed.stderr
    (line,) = listed.stdout.splitlines()
    delivery_id, state, attempts, url, plant, error = line.split("\t")
    assert (state, attempts, plant) == ("dead", "3 attempts", "plant 1")
    assert error == "HTTP 500 Internal Server Error"
    assert run_cli("webhooks", "retry", "nope", "--data-dir", str(data)).returncode == 2

    retried = run_cli("webhooks", "retry", delivery_id, "--data-dir", str(data))
    assert retried.returncode == 0 and "1 dead letter back in the outbox" in retried.stdout
    assert "\towed\t0 attempts\t" in run_cli("webhooks", "list", "--data-dir", str(data)).stdout
    port = urlsplit(url).port  # the same subscriber, now answering
    with Receiver(port=port) as receiver, Server(data, *serve_flags(receiver.url)):
        ((headers, body),) = receiver.wait_for(1)
    assert headers["webhook-id"] == delivery_id and verified(headers, body)
    assert run_cli("webhooks", "list", "--data-dir", str(data)).stdout == ""


@pytest.mark.slow
def test_retry_of_dead_letters_reaches_a_running_server(tmp_path):
    data = tmp_path / "data"
    with (Receiver(answers=[500, 500]) as receiver,
          Server(data, *serve_flags(receiver.url, attempts=2)) as server):
        server.request("POST", "/plants", {"id": 1, "name": "Fern"}, token=server.first_token)
        receiver.wait_for(2, delivered=False)
        deadline = time.monotonic() + 5
        while "dead\t" not in run_cli("webhooks", "list", "--data-dir", str(data)).stdout:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        retried = run_cli("webhooks", "retry", "--data-dir", str(data))
        assert "back in the outbox of the running server" in retried.stdout, retried.stderr
        ((headers, body),) = receiver.wait_for(1, timeout=webhooks.IDLE + 5)
        assert verified(headers, body)


@pytest.mark.slow
def test_deliveries_survive_kill_9_and_never_slow_the_create(tmp_path):
    data = tmp_path / "data"
    port = free_port()  # nobody listens yet: every attempt is refused
    url = f"http://127.0.0.1:{port}/hook"
    with Server(data, *serve_flags(url)) as server:
        token = server.first_token
        started = time.monotonic()
        for plant_id in range(20):
            status, _, _ = server.request("POST", "/plants", {"id": plant_id, "name": "p"},
                                          token=token)
            assert status == 200
        assert time.monotonic() - started < 5  # no create waited for the dead receiver
        time.sleep(0.3)  # some failed attempts are recorded
        server.stop(signal.SIGKILL)
    with Receiver(port=port) as receiver, Server(data, *serve_flags(url)):
        got = receiver.wait_for(20)
        time.sleep(0.2)
    plant_ids = sorted(json.loads(body)["id"] for _, body in got)
    assert plant_ids == list(range(20))  # each at least once: after kill -9, maybe twice
    assert all(verified(headers, body) for headers, body in got)


@pytest.mark.slow
def test_the_worker_stops_cleanly_with_a_delivery_in_flight(tmp_path):
    data = tmp_path / "data"
    with Receiver(delay=1.0) as receiver:
        with Server(data, *serve_flags(receiver.url)) as server:
            server.request("POST", "/plants", {"id": 1, "name": "Fern"}, token=server.first_token)
            deadline = time.monotonic() + 5
            while not receiver.arrivals:  # the worker now waits for the slow answer
                assert time.monotonic() < deadline
                time.sleep(0.01)
            started = time.monotonic()
            assert server.stop() == 0
            assert time.monotonic() - started < 5
        assert "plant-store stopped" in "".join(server.stderr)
        assert len(receiver.delivered()) == 1
    assert run_cli("webhooks", "list", "--data-dir", str(data)).stdout == ""
