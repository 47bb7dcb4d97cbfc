"""What the operator is told about webhook deliveries is true: a retry handed to a server
that sends no webhooks is refused and changes nothing, and deliveries owed to URLs no longer
configured are reported at start."""

import time

from serverproc import Server, free_port, run_cli
from test_webhooks import serve_flags


def wait_listed(data, text, timeout=10):
    deadline = time.monotonic() + timeout
    while text not in (listed := run_cli("webhooks", "list", "--data-dir", str(data))).stdout:
        assert time.monotonic() < deadline, listed.stdout
        time.sleep(0.05)
    return listed.stdout


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
