"""The real-server half of tests/unit/webhooks/test_webhook_lanes.py: misbehaving subscribers: a
whole delivery ends by ``webhook_timeout``, one subscriber's lane never delays another's, and a
stop waits for no subscriber longer than that."""

import json
import signal
import subprocess
import time

import pytest

from plant_store.config import Config
from plant_store.stores import MemoryStore
from plant_store.stores.records import Plant
from plant_store.webhooks import worker as webhooks
from support.receiver import SECRET, Receiver, Stalling, verified
from support.servers import Server, run_cli


def worker_for(store, *urls, timeout):
    config = Config(store="memory", webhook_urls=urls, webhook_secret=SECRET,
                    webhook_backoff=60, webhook_timeout=timeout)
    return webhooks.WebhookWorker(store, config).start()


def test_a_dripping_subscriber_holds_a_delivery_no_longer_than_the_timeout():
    store = MemoryStore()
    with Stalling(drip=0.2) as dripper:
        worker = worker_for(store, dripper.url, timeout=1)
        try:
            store.create(Plant(1, "Fern"), (dripper.url,))
            started = time.monotonic()
            worker.wake()
            while store.deliveries()[0].attempts == 0:
                assert time.monotonic() - started < 3, "the attempt was never recorded"
                time.sleep(0.01)
            elapsed = time.monotonic() - started
        finally:
            dripper.close()  # so that a worker that failed this test can still stop
            worker.stop()
    (delivery,) = store.deliveries()
    assert 0.9 < elapsed < 1.5, elapsed
    assert delivery.error == "TimeoutError: no complete answer within 1 s"
    assert dripper.arrivals == 1  # the back-off (60 s) holds the retry


@pytest.mark.slow
def test_a_silent_subscriber_does_not_delay_a_healthy_one():
    store = MemoryStore()
    with Stalling() as silent, Receiver() as healthy:
        urls = (silent.url, healthy.url)
        worker = worker_for(store, *urls, timeout=2)
        try:
            for plant_id in range(20):
                store.create(Plant(plant_id, "p"), urls)
                worker.wake()
            got = healthy.wait_for(20, timeout=2)
            assert silent.arrivals == 1  # one delivery in flight per URL
        finally:
            started = time.monotonic()
            worker.stop()  # waits for the silent subscriber's delivery, to its deadline
            stopped_in = time.monotonic() - started
    assert sorted(json.loads(body)["id"] for _, body in got) == list(range(20))
    assert stopped_in < 2 + 1
    owed = store.deliveries()
    assert {d.url for d in owed} == {silent.url} and len(owed) == 20


class StaleListing(MemoryStore):
    """A store whose outbox listing is a little old when it arrives: lanes may end, and
    settle what it lists, while it is on its way (the race a pass must not lose)."""

    def deliveries(self, *, dead=False):
        owed = super().deliveries(dead=dead)
        time.sleep(0.03)
        return owed


def test_one_delivery_in_flight_per_url_and_none_sent_twice():
    store = StaleListing()
    with Receiver(delay=0.01) as first, Receiver(delay=0.01) as second:
        urls = (first.url, second.url)
        worker = worker_for(store, *urls, timeout=2)
        try:
            for plant_id in range(30):
                store.create(Plant(plant_id, "p"), urls)
                worker.wake()
            got = [first.wait_for(30), second.wait_for(30)]
            time.sleep(0.1)  # a second send of any delivery would arrive by now
        finally:
            worker.stop()
    for receiver, delivered in zip((first, second), got, strict=True):
        ids = [headers["webhook-id"] for headers, _ in receiver.delivered()]
        assert len(ids) == len(set(ids)) == 30
        assert all(verified(headers, body) for headers, body in delivered)
        assert [json.loads(body)["id"] for _, body in delivered] == list(range(30))  # in order
        assert receiver.most_at_once == 1
    assert store.deliveries() == []


def test_sigterm_ends_the_server_within_the_timeout_whatever_a_subscriber_does(tmp_path):
    timeout = 1
    with Stalling(drip=0.2) as dripper:
        server = Server(tmp_path / "data", "--webhook-urls", dripper.url, "--webhook-secret",
                        SECRET, "--webhook-timeout", str(timeout), "--webhook-backoff", "0.05")
        with server:
            status, _, _ = server.request("POST", "/plants", {"id": 1, "name": "Fern"},
                                          token=server.first_token)
            assert status == 200
            deadline = time.monotonic() + 5
            while not dripper.arrivals:  # a delivery is in flight, being dripped to
                assert time.monotonic() < deadline
                time.sleep(0.01)
            time.sleep(0.3)
            signalled = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            try:
                returncode = server.proc.wait(timeout + 2)
            except subprocess.TimeoutExpired:
                returncode = None
            exited_in = time.monotonic() - signalled
        assert returncode == 0, "".join(server.stderr)
        assert exited_in < timeout + 1, exited_in


def test_what_a_subscriber_answers_reaches_the_log_as_one_escaped_line():
    """A garbage status line (NUL, CR LF, a byte that is not UTF-8) or a reason phrase is
    the subscriber's text: it must not split a log line or a 'webhooks list' row."""
    import socket
    import threading

    from plant_store.webhooks.bounded_post import ERROR_LIMIT, post

    listener = socket.create_server(("127.0.0.1", 0))
    answers = [b"\x00\xff garbage\r\n\r\n",
               b"HTTP/1.1 500 Bad\x1b[2J\x85 " + b"x" * 5000 + b"\r\nContent-Length: 0\r\n\r\n"]

    def serve():
        for answer in answers:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
    try:
        errors = [post(url, b"{}", {}, timeout=2) for _ in answers]
    finally:
        listener.close()
    for error in errors:
        assert error and error.isprintable() and len(error) <= ERROR_LIMIT, repr(error)
    assert "\\x00" in errors[0] and "\\x1b" in errors[1]


HANGING_RESOLVER = """
import socket, time
_getaddrinfo = socket.getaddrinfo
def getaddrinfo(host, *args, **kwargs):
    if host == "hang.invalid":  # a DNS server that never answers
        time.sleep(30)
    return _getaddrinfo(host, *args, **kwargs)
socket.getaddrinfo = getaddrinfo
"""


def test_a_host_whose_name_never_resolves_holds_a_delivery_no_longer_than_the_timeout(
        tmp_path):
    timeout = 1
    url = "http://hang.invalid/hook"
    data = tmp_path / "data"
    server = Server(data, "--webhook-urls", url, "--webhook-secret", SECRET,
                    "--webhook-timeout", str(timeout), "--webhook-backoff", "60",
                    prelude=HANGING_RESOLVER)
    with server:
        status, _, _ = server.request("POST", "/plants", {"id": 1, "name": "Fern"},
                                      token=server.first_token)
        assert status == 200
        time.sleep(0.3)  # the delivery is waiting for its host's address
        signalled = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        try:
            returncode = server.proc.wait(timeout + 3)
        except subprocess.TimeoutExpired:
            returncode = None
        exited_in = time.monotonic() - signalled
    assert returncode == 0, "".join(server.stderr)
    assert exited_in < timeout + 1.5, exited_in
    (row,) = run_cli("webhooks", "list", "--data-dir", str(data)).stdout.splitlines()
    assert url in row and "TimeoutError" in row, row  # failed, and still owed


