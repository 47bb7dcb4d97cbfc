"""The real-server half of tests/unit/http/test_rate_limit.py: the rate limit: the bucket
table's arithmetic and invariants (with a clock of the test's own, and with many threads), the
middleware through the app (who a client is, what is never limited, the answer's shape, the
metrics, the document), a real server under a flood, and the single-flight scrapes of
/metrics."""

import threading
import time

import pytest

from support.servers import Server, run_cli

# The bucket table.


# Through the app.

ALICE, BOB = "alice-token", "bob-token"


@pytest.mark.slow
def test_a_flood_from_one_token_and_one_address_leaves_another_clients_creates(tmp_path):
    """A real server: one token lists with limit=1000 as fast as it can, one address
    fetches the document as fast as it can; both get 429s with Retry-After, while another
    token's creates, below the limit, are all answered 200."""
    with Server(tmp_path, "--rate-limit", "20", "--rate-limit-burst", "5") as server:
        creator = server.first_token
        result = run_cli("token", "add", "--label", "flood", "--data-dir", str(tmp_path))
        assert result.returncode == 0, result.stderr
        flood_token = result.stdout.strip()
        statuses = {"token": [], "address": []}
        retry_after = set()
        stop = threading.Event()

        def flood(kind):
            while not stop.is_set():
                if kind == "token":
                    answer = server.request("GET", "/plants?limit=1000", token=flood_token)
                else:
                    answer = server.request("GET", "/openapi.json", source="127.0.0.2")
                statuses[kind].append(answer[0])
                if answer[0] == 429:
                    assert answer[2]["error"] == 429
                    retry_after.add(answer[1]["Retry-After"])

        floods = [threading.Thread(target=flood, args=(kind,))
                  for kind in ("token", "address", "token", "address")]
        for thread in floods:
            thread.start()
        try:
            created = []
            for n in range(20):  # 10 a second, half the limit
                created.append(server.request("POST", "/plants", {"id": n, "name": "p"},
                                              creator)[0])
                time.sleep(0.1)
        finally:
            stop.set()
            for thread in floods:
                thread.join()
        assert created == [200] * 20
        for kind in ("token", "address"):
            assert statuses[kind].count(429) > statuses[kind].count(200) > 0, kind
            assert set(statuses[kind]) == {200, 429}, kind
        assert retry_after == {"1"}


# /metrics: single flight.


