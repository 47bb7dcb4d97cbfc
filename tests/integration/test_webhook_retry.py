"""What the operator is told about webhook deliveries is true: a retry handed to a server
that sends no webhooks is refused and changes nothing, and deliveries owed to URLs no longer
configured are reported at start."""

import os
import signal
import subprocess
import sys
import time

import pytest

from support.receiver import serve_flags
from support.servers import Server, free_port, run_cli


def wait_listed(data, text, timeout=10):
    deadline = time.monotonic() + timeout
    while text not in (listed := run_cli("webhooks", "list", "--data-dir", str(data))).stdout:
        assert time.monotonic() < deadline, listed.stdout
        time.sleep(0.05)
    return listed.stdout


@pytest.mark.slow
def test_retry_is_refused_by_a_running_server_that_sends_no_webhooks(tmp_path):
    data, refused = tmp_path / "data", f"http://127.0.0.1:{free_port()}/"
    with Server(data, *serve_flags(refused, attempts=1)) as server:
        server.request("POST", "/plants", {"id": 1, "name": "Fern"}, token=server.first_token)
        wait_listed(data, "\tdead\t")
    with Server(data):  # no webhook settings: nothing would send a retried delivery
        started = time.monotonic()
        retried = run_cli("webhooks", "retry", "--data-dir", str(data))
        took = time.monotonic() - started
    assert retried.returncode == 2, retried.stdout
    assert "did not take the request within 7 s, so nothing changed" in retried.stderr
    assert "only when started with webhook_secret" in retried.stderr
    assert 6.5 < took < 12
    assert "\tdead\t1 attempts\t" in wait_listed(data, "\tdead\t")
    assert not [p.name for p in data.iterdir() if "retry" in p.name]  # the request withdrawn


@pytest.mark.slow
def test_owed_deliveries_to_urls_no_longer_configured_are_reported_at_start(tmp_path):
    data, gone = tmp_path / "data", f"http://127.0.0.1:{free_port()}/gone"
    flags = [*serve_flags(gone), "--webhook-backoff", "600"]  # owed, not retried meanwhile
    with Server(data, *flags) as server:
        server.request("POST", "/plants", {"id": 1, "name": "Fern"}, token=server.first_token)
        wait_listed(data, "\towed\t1 attempts\t")
    with Server(data) as server:
        assert server.stop() == 0
    assert (f"1 webhook delivery owed to {gone}, which webhook_urls does not list: nothing "
            "sends them until the server runs with webhook_secret") in "".join(server.stderr)
    other = f"http://127.0.0.1:{free_port()}/new"
    with Server(data, *serve_flags(other), "--webhook-backoff", "600") as server:
        assert server.stop() == 0
    assert (f"1 webhook delivery owed to {gone}, which webhook_urls does not list: they are "
            "still sent there") in "".join(server.stderr)
    assert other not in "".join(server.stderr)


def cli(*args):
    return subprocess.Popen([sys.executable, "-m", "plant_store", *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def dead_letters(data, count):
    """``count`` dead letters in ``data`` (a subscriber nobody listens at, one attempt)."""
    refused = f"http://127.0.0.1:{free_port()}/"
    with Server(data, *serve_flags(refused, attempts=1)) as server:
        for plant_id in range(count):
            server.request("POST", "/plants", {"id": plant_id, "name": "p"},
                           token=server.first_token)
        deadline = time.monotonic() + 10
        while (listed := wait_listed(data, "\tdead\t")).count("\tdead\t") < count:
            assert time.monotonic() < deadline, listed
            time.sleep(0.05)
    return [line.split("\t")[0] for line in listed.splitlines()]


@pytest.mark.slow
def test_concurrent_retries_are_each_taken(tmp_path):
    data = tmp_path / "data"
    first, second = dead_letters(data, 2)
    gone = f"http://127.0.0.1:{free_port()}/"  # a server that sends, to nobody: stays owed
    with Server(data, *serve_flags(gone), "--webhook-backoff", "600"):
        retries = [cli("webhooks", "retry", first, "--data-dir", str(data)),
                   cli("webhooks", "retry", second, "--data-dir", str(data))]
        outcomes = [(p.wait(timeout=30), p.communicate()) for p in retries]
        listed = wait_listed(data, "\towed\t")
    assert [status for status, _ in outcomes] == [0, 0], outcomes
    assert "\tdead\t" not in listed and listed.count("\towed\t") == 2, listed
    assert not [p.name for p in data.iterdir() if p.name.startswith("webhooks-retry")]


def test_a_retry_beside_a_server_that_sends_nothing_never_claims_success(tmp_path):
    data = tmp_path / "data"
    first, second = dead_letters(data, 2)
    with Server(data):
        early = cli("webhooks", "retry", first, "--data-dir", str(data))
        time.sleep(2)
        late = cli("webhooks", "retry", second, "--data-dir", str(data))
        outcomes = [(p.wait(timeout=30), p.communicate()[1]) for p in (early, late)]
    assert [status for status, _ in outcomes] == [2, 2], outcomes
    assert all("nothing changed" in err for _, err in outcomes)
    assert wait_listed(data, "\tdead\t").count("\tdead\t") == 2


@pytest.mark.slow
def test_ctrl_c_while_waiting_withdraws_the_request_in_one_line(tmp_path):
    data = tmp_path / "data"
    dead_letters(data, 1)
    with Server(data):
        retrying = cli("webhooks", "retry", "--data-dir", str(data))
        time.sleep(1.5)
        retrying.send_signal(signal.SIGINT)
        status, (out, err) = retrying.wait(timeout=10), retrying.communicate()
    assert status == 2 and out == ""
    assert err == ("plant-store: error: interrupted; the request was withdrawn before the "
                   "server took it, so nothing changed\n")
    assert not [p.name for p in data.iterdir() if p.name.startswith("webhooks-retry")]


@pytest.mark.slow
def test_unreadable_requests_are_logged_and_removed_and_later_ones_still_work(tmp_path):
    """Garbage in a request file is removed; what is not a file (a directory, a FIFO: the
    command makes neither) is logged once and left alone, its contents untouched."""
    data = tmp_path / "data"
    (dead,) = dead_letters(data, 1)
    (data / "webhooks-retry-garbage.json").write_bytes(b"\xff not json")
    (data / "webhooks-retry-number.json").write_bytes(b"42")
    (data / "webhooks-retry-dir.json").mkdir()
    (data / "webhooks-retry-dir.json" / "someone's").write_text("kept")
    os.mkfifo(data / "webhooks-retry-fifo.json")  # read as a file, it would hang the worker
    gone = f"http://127.0.0.1:{free_port()}/"
    with Server(data, *serve_flags(gone), "--webhook-backoff", "600") as server:
        retried = run_cli("webhooks", "retry", dead, "--data-dir", str(data))
        assert retried.returncode == 0, retried.stderr
    log = "".join(server.stderr)
    assert log.count("ignoring webhook retry request") == 4, log
    assert log.count("not a regular file, which plant-store never makes") == 2, log
    assert "Traceback" not in log
    assert sorted(p.name for p in data.iterdir() if p.name.startswith("webhooks-retry")) == [
        "webhooks-retry-dir.json", "webhooks-retry-fifo.json"]
    assert (data / "webhooks-retry-dir.json" / "someone's").read_text() == "kept"
