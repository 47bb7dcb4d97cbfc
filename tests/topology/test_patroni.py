"""The PostgreSQL store behind Patroni (etcd, three nodes, synchronous mode strict) and
HAProxy routing to the node whose REST API says ``/primary``: a planned switchover to the
synchronous standby, and a crash (``kill -9``) of the leader's postmaster, each while
client threads create plants with fresh ids through ``plant-store serve``.

After each event, on the leader that came out of it:
- every create answered 200 is there (no acknowledged create lost);
- every 503 whose plant is there said the outcome was unknown ("may have been created"),
  never "not created";
- the service answers 200 again, and keeps doing so, within RECOVERY seconds of HAProxy
  routing to the new leader (the pool's reconnects must not lag the database);
- ``/ready``, polled every 100 ms throughout, always answered within READY_BOUND.

The cluster forms once for the module (tests/support/patroni_cluster.py).
:func:`failover_under_load` returns the figures, so the same scenario measures another
checkout of the service (``env={"PYTHONPATH": tree}``, from a working directory outside
this clone: ``python -m`` puts the working directory ahead of PYTHONPATH).
"""

import itertools
import random
import threading
import time

import pytest

from plant_store.tokens import TokenFile
from support.needs import needed
from support.patroni_cluster import PatroniCluster, missing
from support.servers import Server, wait_answering

# Minutes each, a cluster started in a fixture: a timeout of their own (setup.cfg has 300 s).
pytestmark = [pytest.mark.topology, pytest.mark.timeout(900)]

THREADS = 12
DEADLINE = 5.0  # --database-timeout
RECOVERY = 3.0  # seconds from HAProxy routing to the new leader to 200s again
READY_BOUND = 1.2  # seconds: orchestrators probe /ready with a 1 s timeout
UNKNOWN = "may have been created"


@pytest.fixture(scope="module")
def cluster():
    reason = missing()
    needed(None if reason else True, reason or "", "patroni, etcd-server, haproxy", "Patroni")
    cluster = PatroniCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.cleanup()


class Load:
    """THREADS clients, each POSTing plants with fresh ids on a fresh connection, one after
    another; a poller of ``/ready`` every 100 ms; a watcher of which node Patroni says is
    the primary and where HAProxy routes. Everything is timestamped (time.monotonic)."""

    def __init__(self, cluster, server, token, threads=THREADS):
        self.cluster, self.server, self.token = cluster, server, token
        self.ids = itertools.count(random.randrange(1, 10**6) * 10**6)
        self.creates = []  # (id, started, ended, status, message)
        self.ready = []  # (started, latency, status)
        self.primary = []  # (time, names Patroni says are primary, names HAProxy routes to)
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._create) for _ in range(threads)]
        self.threads += [threading.Thread(target=self._probe),
                         threading.Thread(target=self._watch)]

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info):
        self.stopping.set()
        for thread in self.threads:
            thread.join(30)

    def _create(self):
        while not self.stopping.is_set():
            plant_id = next(self.ids)
            started = time.monotonic()
            try:
                status, _, body = self.server.request(
                    "POST", "/plants", {"id": plant_id, "name": "Monstera"}, self.token,
                    timeout=30)
            except OSError as exc:
                status, body = None, repr(exc)
            message = body.get("message", "") if isinstance(body, dict) else str(body)[:200]
            self.creates.append((plant_id, started, time.monotonic(), status, message))

    def _probe(self):
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                status = self.server.request("GET", "/ready", timeout=10)[0]
            except OSError:
                status = None
            self.ready.append((started, time.monotonic() - started, status))
            self.stopping.wait(max(0.0, started + 0.1 - time.monotonic()))

    def _watch(self):
        while not self.stopping.is_set():
            now = time.monotonic()
            primaries = {node.name for node in self.cluster.nodes
                         if node.is_primary(timeout=0.3) and node.writable()}
            try:
                routed = set(self.cluster.haproxy_up())
            except OSError:
                routed = None
            self.primary.append((now, primaries, routed))
            self.stopping.wait(max(0.0, now + 0.05 - time.monotonic()))


def switchover(cluster):
    """``patronictl switchover`` to the synchronous standby; the candidate's name."""
    leader, candidate = cluster.leader(), cluster.sync_standby()
    done = cluster.patronictl("switchover", "plants", "--leader", leader.name,
                              "--candidate", candidate.name, "--force")
    assert done.returncode == 0, done.stdout + done.stderr
    return candidate.name


def kill_leader(cluster):
    """``kill -9`` of the leader's postmaster (Patroni itself stays); None: whichever node
    Patroni makes the leader next (it restarts its own, still holding the leader key)."""
    cluster.kill_postmaster(cluster.leader())
    return None


def failover_under_load(cluster, tmp_path, event, *, env=None, threads=THREADS):
    """Run ``event(cluster)`` while ``threads`` clients create plants through the service;
    return the figures (see :func:`figures`)."""
    cluster.wait_healthy(60)
    old_pid = cluster.leader().postmaster_pid
    token_file = tmp_path / "tokens.json"
    token = TokenFile(str(token_file)).add("t")
    server = Server(tmp_path / "data", "--store", "postgresql", "--database-url",
                    f"postgresql://postgres@127.0.0.1:{cluster.port}/postgres",
                    "--database-timeout", str(DEADLINE), "--token-file", str(token_file),
                    env=env)
    try:
        wait_answering(server.port, server.proc, "/ready", timeout=30)
        with Load(cluster, server, token, threads) as load:
            time.sleep(1.5)
            event_at = time.monotonic()
            expected = event(cluster)
            cluster.wait_healthy(45)
            # Past the new leader by the deadline and a few seconds: the pool's retries
            # and reconnects, and what is answered once they settle.
            wait_until = time.monotonic() + DEADLINE + 2
            while time.monotonic() < wait_until and server.proc.poll() is None:
                time.sleep(0.1)
            leader = cluster.wait_healthy(45)
        assert expected is None or leader.name == expected, (leader.name, expected)
        assert leader.postmaster_pid != old_pid, "the leader's postmaster did not change"
        return figures(load, leader, event_at)
    finally:
        server.stop()


def figures(load, leader, event_at):
    """What the event did to the service, from the load's records and the new leader."""
    ids = [c[0] for c in load.creates]
    with leader.connect() as conn:
        stored = {row[0] for row in conn.execute(
            "SELECT id FROM plant_store_plants WHERE id = ANY(%s)", [ids])}
    # When the database was away and back: no node taking writes, then the new leader
    # taking them (Patroni's REST API says primary, PostgreSQL is out of recovery and a
    # synchronous standby streams from it), then HAProxy routing to it alone.
    after = [(t, p, r) for t, p, r in load.primary if t >= event_at]
    down_at = next((t for t, p, _ in after if not p), event_at)
    up_at = next((t for t, p, _ in after if t >= down_at and p == {leader.name}), None)
    assert up_at is not None, f"{leader.name} never took writes: {after}"
    routed_at = next((t for t, _, r in after if t >= up_at and r == {leader.name}), None)
    assert routed_at is not None, f"HAProxy never routed to {leader.name}: {after}"
    # 200s again: the first of the creates, in the order they started, from which every
    # create got 200; when it ended.
    creates = sorted(load.creates, key=lambda c: c[1])
    failed = [i for i, c in enumerate(creates) if c[3] != 200]
    suffix = creates[failed[-1] + 1:] if failed else [c for c in creates if c[2] >= up_at]
    back_at = min((c[2] for c in suffix), default=None)
    ready = [r for r in load.ready if r[0] >= event_at - 1]
    return {
        "leader": leader.name,
        "outage": round(up_at - event_at, 2),  # event to the new leader taking writes
        "haproxy_after_up": round(routed_at - up_at, 2),
        "back_after_up": None if back_at is None else round(back_at - up_at, 2),
        "back_after_haproxy": None if back_at is None else round(back_at - routed_at, 2),
        "creates": len(creates),
        "ok": sum(c[3] == 200 for c in creates),
        "503": sum(c[3] == 503 for c in creates),
        "other": sorted({(c[3], c[4][:120]) for c in creates if c[3] not in (200, 503)},
                        key=str),
        "lost": sorted(c[0] for c in creates if c[3] == 200 and c[0] not in stored),
        "not_created_but_stored": sorted(c[0] for c in creates if c[3] == 503
                                         and c[0] in stored and UNKNOWN not in c[4]),
        "unknown_503": sum(c[3] == 503 and UNKNOWN in c[4] for c in creates),
        "unknown_503_stored": sum(c[3] == 503 and UNKNOWN in c[4] and c[0] in stored
                                  for c in creates),
        "ready_worst": round(max(r[1] for r in ready), 2),
        "ready_unanswered": sum(r[2] is None for r in ready),
        "messages_503": sorted({c[4][:80] for c in creates if c[3] == 503}),
    }


def check(result):
    assert result["ok"] > 0 and result["creates"] > result["ok"] // 2, result
    assert not result["other"], result  # 200 or 503, never a 500 or no answer
    assert not result["lost"], result
    assert not result["not_created_but_stored"], result
    assert result["back_after_haproxy"] is not None, f"never 200s again: {result}"
    assert result["back_after_haproxy"] <= RECOVERY, result
    assert result["ready_worst"] < READY_BOUND, result
    assert result["ready_unanswered"] == 0, result


def test_switchover_to_the_synchronous_standby_under_load(cluster, tmp_path):
    result = failover_under_load(cluster, tmp_path, switchover)
    print("switchover", result)
    check(result)


def test_kill_9_of_the_leaders_postmaster_under_load(cluster, tmp_path):
    result = failover_under_load(cluster, tmp_path, kill_leader)
    print("kill -9", result)
    check(result)
