"""Dead webhook deliveries on PostgreSQL, seen and sent again with 'plant-store webhooks'
while two 'plant-store serve' instances run on the same database: listed, retried whole or
not at all, a retry taken once however many run at once, and each retried delivery sent
once (the receiver counts)."""

import json
import subprocess
import sys
import time

import pytest

from plant_store.tokens import TokenFile
from support.receiver import SECRET, Receiver
from support.servers import Server, run_cli

IDLE = 5  # plant_store.webhooks.worker.IDLE: the longest a worker waits between looks
DEAD = 10  # dead letters made, by creates spread over both instances


@pytest.fixture
def two_instances(tmp_path, database_url):
    """Two instances on one database, both sending to a subscriber that refuses the first
    DEAD requests; one attempt each, so DEAD plants make DEAD dead letters."""
    token_file = tmp_path / "tokens.json"
    token = TokenFile(str(token_file)).add("instances")
    with Receiver(answers=[500] * DEAD) as receiver:
        flags = ("--store", "postgresql", "--database-url", database_url,
                 "--token-file", str(token_file), "--webhook-urls", receiver.url,
                 "--webhook-secret", SECRET, "--webhook-max-attempts", "1",
                 "--webhook-timeout", "2", "--webhook-backoff", "0.05")
        servers = [Server(tmp_path / f"i{n}", *flags) for n in range(2)]
        try:
            for plant_id in range(DEAD):
                server = servers[plant_id % 2]
                status, _, _ = server.request("POST", "/plants",
                                              {"id": plant_id, "name": f"p{plant_id}"}, token)
                assert status == 200
            yield database_url, receiver
        finally:
            for server in servers:
                server.stop()


def webhooks(database_url, *args):
    return run_cli("webhooks", *args, "--store", "postgresql", "--database-url", database_url)


def listed(database_url, state, count, timeout=15):
    """The 'webhooks list' rows once ``count`` of them are in ``state`` (owed, dead)."""
    deadline = time.monotonic() + timeout
    while True:
        done = webhooks(database_url, "list")
        assert done.returncode == 0, done.stderr
        rows = [line.split("\t") for line in done.stdout.splitlines()]
        if sum(row[1] == state for row in rows) == count:
            return rows
        assert time.monotonic() < deadline, done.stdout
        time.sleep(0.1)


@pytest.mark.slow  # two servers and a worker's look: about 10 s
def test_dead_letters_are_listed_and_retried_once_with_two_instances_running(two_instances):
    database_url, receiver = two_instances
    rows = listed(database_url, "dead", DEAD)
    assert len(rows) == DEAD
    assert all(row[2] == "1 attempts" and row[3] == receiver.url for row in rows), rows
    assert sorted(row[4] for row in rows) == sorted(f"plant {n}" for n in range(DEAD))
    assert all("500" in row[5] for row in rows), rows
    dead = {row[0] for row in rows}

    # Two operators retry at once: each dead letter is moved by one of them.
    command = [sys.executable, "-m", "plant_store", "webhooks", "retry", "--store",
               "postgresql", "--database-url", database_url]
    retries = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(2)]
    outcomes = [(p.wait(timeout=60), *p.communicate()) for p in retries]
    assert [status for status, _, _ in outcomes] == [0, 0], outcomes
    said = sorted(out + err for _, out, err in outcomes)
    assert said[0].startswith(f"{DEAD} dead letters back in the outbox: an instance running on "
                              "this database with webhook_secret sends them within 5 s"), said
    assert said[1] == "no dead letters to retry\n", said

    delivered = receiver.wait_for(DEAD, timeout=IDLE + 10)
    time.sleep(IDLE + 1)  # long enough for either instance to send one again, were it to
    ids = [headers["webhook-id"] for headers, _ in receiver.delivered()]
    assert sorted(ids) == sorted(dead), ids  # each retried delivery sent once
    assert len(receiver.requests) == 2 * DEAD  # each refused once, then delivered once
    assert sorted(json.loads(body)["id"] for _, body in delivered) == list(range(DEAD))
    done = webhooks(database_url, "list")
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr == "no deliveries owed and no dead letters\n"


@pytest.mark.slow  # two servers and a worker's look: about 10 s
def test_a_named_retry_is_whole_or_nothing(two_instances):
    database_url, receiver = two_instances
    first, *_ = (row[0] for row in listed(database_url, "dead", DEAD))
    refused = webhooks(database_url, "retry", first, "msg_nosuchdelivery")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == ("plant-store: error: msg_nosuchdelivery is not a dead letter, "
                              "so nothing changed; see 'plant-store webhooks list'\n")
    assert len(listed(database_url, "dead", DEAD)) == DEAD  # the named dead letter not moved either

    retried = webhooks(database_url, "retry", first)
    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.startswith("1 dead letter back in the outbox")
    [(headers, _)] = receiver.wait_for(1, timeout=IDLE + 10)
    assert headers["webhook-id"] == first
    assert len(listed(database_url, "dead", DEAD - 1)) == DEAD - 1
    again = webhooks(database_url, "retry", first)  # delivered now: no longer a dead letter
    assert again.returncode == 2 and "is not a dead letter" in again.stderr


def test_the_list_migrates_nothing(database_url):
    """A command that only reads refuses a schema it would have to change."""
    done = webhooks(database_url, "list")
    assert done.returncode == 2 and done.stdout == ""
    assert "lacks migrations" in done.stderr and "plant-store db migrate" in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_retry_dead_is_whole_or_nothing_on_every_store(store):
    """Store.retry_dead, which the command calls: the JSON-file store's server and the
    PostgreSQL store's command alike move dead letters back whole, or refuse and move none."""
    from plant_store.stores.records import Plant

    url = "http://127.0.0.1:9/hook"
    for plant_id in (1, 2, 3):
        store.create(Plant(plant_id, f"p{plant_id}"), [url])
    first, second, third = (d.id for d in store.deliveries())
    for delivery_id in (first, second):
        store.settle(delivery_id, "dead", "refused")
    assert [d.id for d in store.outbox()] == [third, first, second]  # owed, then dead
    with pytest.raises(KeyError) as refused:
        store.retry_dead([first, third])  # the third is owed, not dead
    assert refused.value.args == (third,)
    assert [d.id for d in store.deliveries(dead=True)] == [first, second]
    assert store.retry_dead([second]) == [second]
    assert store.retry_dead() == [first]
    assert store.retry_dead() == []
    assert store.outbox_counts() == (3, 0)
    assert all(d.attempts == 0 and d.error is None for d in store.outbox())
