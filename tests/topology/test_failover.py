"""The PostgreSQL store on a primary with a synchronous standby (tests/support/pgcluster.py), as an
operator runs it: ``plant-store serve`` on the libpq multi-host URL of both nodes with
``target_session_attrs=read-write``, 16 clients creating plants with fresh ids, ``/ready``
polled every 100 ms, while the primary is killed and the standby promoted (twice), the
standby stops and a commit waiting for it is cancelled, and the primary freezes.

Each answer is checked against what the new primary holds: every 200 is there, every 503
for a plant that is there said "outcome unknown", no answer waits past the deadline (plus
the watchdog's grace), 200s come back within seconds of a promotion, and ``/ready`` always
answers within a second.

The scenario functions return what they saw, so that the same run can be measured on an
older checkout (``env={"PYTHONPATH": tree}``) for the before/after tables.
"""

import contextlib
import itertools
import os
import threading
import time

import pytest

from plant_store.tokens import TokenFile
from support.needs import NO_POSTGRES, needed
from support.pgcluster import UNKNOWN, Cluster, Load, ReadyPoller, create, tally
from support.pgserver import find_bindir
from support.servers import Server

# Minutes each, a cluster started in a fixture: a timeout of their own (setup.cfg has 300 s).
pytestmark = [pytest.mark.topology, pytest.mark.timeout(900)]

DEADLINE = 5  # --database-timeout, the default operators run
GRACE = 1.0  # the watchdog's cancel, then the socket shut down (postgres/connection.py)
CLIENTS = 16
THREADS = 24  # waitress threads: more than the clients, so /ready never queues behind them
CLIENT_TIMEOUT = 15  # seconds a client waits for an answer: "no answer" past it


@pytest.fixture(scope="module")
def bindir():
    return needed(find_bindir(), NO_POSTGRES, "postgresql package", "PostgreSQL")


def serve(cluster, base, env=None):
    """``plant-store serve`` on the cluster's multi-host URL, and a token for it."""
    os.makedirs(base, exist_ok=True)
    token_file = os.path.join(base, "tokens.json")
    token = TokenFile(token_file).add("failover")
    server = Server(os.path.join(base, "data"), "--store", "postgresql",
                    "--database-url", cluster.url(), "--token-file", token_file,
                    "--database-timeout", str(DEADLINE), "--threads", str(THREADS), env=env)
    return server, token


def wait_ready(server, timeout=20):
    deadline = time.monotonic() + timeout
    while server.request("GET", "/ready", timeout=2)[0] != 200:
        assert time.monotonic() < deadline, "never ready:\n" + "".join(server.stderr[-20:])
        time.sleep(0.1)


class Run:
    """What a scenario saw: the attempts, the probes, its events and the ids stored."""

    def __init__(self):
        self.attempts, self.probes, self.events, self.stored = [], [], [], set()
        self.notes = {}

    def rows(self):
        """Per event (name, at, back: when the database was usable again, or None): the
        name, seconds from ``back`` (else ``at``) to the first 200 that ended after it,
        the tally of the attempts that started from ``at`` to the next event, and the
        worst /ready latency of the probes in that span."""
        rows = []
        for (name, at, back), (_, upto, _) in itertools.pairwise(
                [*self.events, ("end", float("inf"), None)]):
            since = back if back is not None else at
            ok = [a.end for a in self.attempts if a.status == 200 and a.end >= since]
            worst = max((p.end - p.start for p in self.probes if at <= p.start < upto),
                        default=0.0)
            rows.append((name, min(ok) - since if ok else None,
                         tally(self.attempts, self.stored, at, upto), worst))
        return rows


def kill_and_promote(bindir, base, env=None, outage=1.0):
    """Two failovers under load: kill -9 of the primary, ``outage`` s, promotion of the
    standby; a fresh synchronous standby of the new primary on the old primary's port;
    again."""
    run = Run()
    cluster = Cluster(bindir)
    server = None
    try:
        server, token = serve(cluster, base, env)
        wait_ready(server)
        with ReadyPoller(server.port) as poller, Load(server.port, token, CLIENTS,
                                                      CLIENT_TIMEOUT) as load:
            time.sleep(1.5)
            for round_ in (1, 2):
                port = cluster.primary.port
                killed = time.monotonic()
                cluster.kill_primary()
                time.sleep(outage)
                promoted = cluster.promote()
                run.events.append((f"kill -9 primary, promote #{round_}", killed, promoted))
                with contextlib.suppress(AssertionError):  # a late recovery is measured
                    load.wait_for(promoted, timeout=10)
                time.sleep(1.0)
                if round_ == 1:
                    started = time.monotonic()
                    cluster.rebuild(port)
                    run.events.append(("new standby built", started, None))
                    time.sleep(1.5)
            time.sleep(1.0)
        run.attempts, run.probes = load.attempts, poller.probes
        run.stored = cluster.primary.ids()
        return run
    finally:
        if server is not None:
            run.notes["log"] = server.stderr
            server.stop()
        cluster.cleanup()


def standby_stopped(bindir, base, env=None):
    """The synchronous standby stopped under load; a commit waiting for it cancelled
    (pg_cancel_backend); the standby back."""
    run = Run()
    cluster = Cluster(bindir)
    server = None
    try:
        server, token = serve(cluster, base, env)
        wait_ready(server)
        with ReadyPoller(server.port) as poller:
            with Load(server.port, token, 8, CLIENT_TIMEOUT) as load:
                time.sleep(1.0)
                stopped = time.monotonic()
                run.events.append(("standby stopped", stopped, None))
                cluster.standby.stop()
                run.notes["stopped_at"] = time.monotonic()
                time.sleep(DEADLINE + GRACE + 1)
            # One create alone, its commit's wait for the standby cancelled by an operator.
            run.events.append(("pg_cancel_backend", time.monotonic(), None))
            box, earlier = [], sync_waiters(cluster.primary)  # old creates still waiting
            waiter = threading.Thread(target=lambda: box.append(
                create(server.port, token, 1_000_000, CLIENT_TIMEOUT)))
            waiter.start()
            run.notes["cancelled"] = cancel_sync_wait(cluster.primary, earlier)
            waiter.join(CLIENT_TIMEOUT + 5)
            run.notes["cancelled_create"] = box[0] if box else None
            # The standby back: 200s again.
            back = time.monotonic()
            cluster.standby.start()
            cluster.wait_streaming(cluster.standby)
            run.events.append(("standby back", back, time.monotonic()))
            with Load(server.port, token, 8, CLIENT_TIMEOUT, first_id=2_000_000) as after:
                with contextlib.suppress(AssertionError):  # a late recovery is measured
                    after.wait_for(back, timeout=15)
                time.sleep(1.0)
            run.notes["retried"] = create(server.port, token, 1_000_000, CLIENT_TIMEOUT)
        run.attempts = load.attempts + after.attempts
        run.probes = poller.probes
        run.stored = cluster.primary.ids()
        run.notes["on_standby"] = cluster.standby.ids()
        return run
    finally:
        if server is not None:
            run.notes["log"] = server.stderr
            server.stop()
        cluster.cleanup()


def sync_waiters(primary):
    """PIDs of the creates waiting for the synchronous standby to confirm their commit."""
    return {pid for (pid,) in primary.sql(
        "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
        "AND query LIKE '%plant_store_plants%'")}


def cancel_sync_wait(primary, earlier=frozenset(), timeout=5):
    """pg_cancel_backend of the first create found waiting for the synchronous standby,
    other than ``earlier``; its PID (None: none was found)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        waiting = sync_waiters(primary) - set(earlier)
        if waiting:
            pid = min(waiting)
            primary.sql("SELECT pg_cancel_backend(%s)", [pid])
            return pid
        time.sleep(0.02)
    return None


def frozen_primary(bindir, base, env=None, frozen_for=DEADLINE + GRACE + 2):
    """The primary frozen (SIGSTOP) under load for ``frozen_for`` s, then the standby
    promoted; the old primary stays frozen until the cluster's cleanup kills it."""
    run = Run()
    cluster = Cluster(bindir)
    server = None
    try:
        server, token = serve(cluster, base, env)
        wait_ready(server)
        with ReadyPoller(server.port) as poller, Load(server.port, token, CLIENTS,
                                                      CLIENT_TIMEOUT) as load:
            time.sleep(1.5)
            frozen = time.monotonic()
            cluster.primary.freeze()
            time.sleep(frozen_for)
            promoted = cluster.promote()
            run.events.append(("primary frozen, standby promoted", frozen, promoted))
            with contextlib.suppress(AssertionError):  # a late recovery is measured
                load.wait_for(promoted, timeout=10)
            time.sleep(1.5)
        run.attempts, run.probes = load.attempts, poller.probes
        run.stored = cluster.primary.ids()
        return run
    finally:
        if server is not None:
            run.notes["log"] = server.stderr
            server.stop(timeout=DEADLINE + 5)
        cluster.cleanup()


def check_truth(run):
    """Every 200 is on the new primary; every 503 of a plant that is there said the
    outcome is unknown; every answer was a 200 or a 503."""
    figures = tally(run.attempts, run.stored)
    assert figures["attempts"] > 0
    assert figures["lost"] == [], f"acknowledged creates lost: {figures['lost']}"
    assert figures["wrong_503"] == [], f"'not created' but created: {figures['wrong_503']}"
    assert not figures["other"], f"answers other than 200 and 503: {figures['other']}"
    acknowledged = {a.id for a in run.attempts if a.status == 200}
    assert acknowledged and acknowledged <= run.stored
    return figures


def check_ready(run, within=1.0):
    assert run.probes and all(p.status in (200, 503) for p in run.probes), \
        [p for p in run.probes if p.status not in (200, 503)][:5]
    worst = max(p.end - p.start for p in run.probes)
    assert worst < within, f"/ready took {worst:.2f} s"


@pytest.fixture(scope="module")
def two_failovers(bindir, tmp_path_factory):
    """One run of kill_and_promote, checked by the tests below."""
    return kill_and_promote(bindir, str(tmp_path_factory.mktemp("failover") / "service"))


def failovers(run):
    return [row for row in run.rows() if row[0].startswith("kill -9")]


def test_kill_9_of_the_primary_and_promotion_twice_every_answer_true(two_failovers):
    run = two_failovers
    figures = check_truth(run)
    assert len(failovers(run)) == 2
    assert figures["longest"] < DEADLINE + GRACE + 0.5, figures["longest"]
    check_ready(run)
    for name, again, _, _ in failovers(run):  # the service found each new primary
        assert again is not None and again < DEADLINE + 2.0, f"{name}: 200s after {again} s"


def test_kill_9_of_the_primary_200s_again_within_2_s_of_each_promotion(two_failovers):
    for name, again, _, _ in failovers(two_failovers):
        assert again is not None and again < 2.0, f"{name}: 200s again after {again} s"


def test_the_synchronous_standby_stopped_then_a_waiting_commit_cancelled(bindir, tmp_path):
    run = standby_stopped(bindir, str(tmp_path / "service"))
    check_truth(run)
    stopped = run.notes["stopped_at"]
    during = [a for a in run.attempts if stopped + 0.3 <= a.start < run.events[1][1]]
    assert during, "no create was tried while the standby was stopped"
    for attempt in during:
        assert attempt.status == 503, attempt
        assert attempt.end - attempt.start < DEADLINE + 1.0, attempt
        assert UNKNOWN in attempt.message, attempt  # committed here, not confirmed there
    # /ready: not ready within a second of the standby going, answering within a second.
    probes = [p for p in run.probes if stopped + 0.3 <= p.start and p.end < run.events[-1][1]]
    assert probes and all(p.status == 503 for p in probes), probes[:5]
    first = min(p.end for p in run.probes if p.start >= stopped and p.status == 503)
    assert first - stopped < 1.0 + 0.1 + 0.2  # a probe's wait, the poll's period, slack
    check_ready(run)
    # The cancelled commit was made here, so it is not "not created" either; never a 200.
    assert run.notes["cancelled"] is not None, "no commit was seen waiting for the standby"
    cancelled = run.notes["cancelled_create"]
    assert cancelled.status == 503 and UNKNOWN in cancelled.message, cancelled
    assert cancelled.id in run.stored
    # The standby back: 200s again, the same create again is a 200, and every
    # acknowledged plant is on the standby too.
    _, back, streaming = run.events[-1]
    again = min(a.end for a in run.attempts if a.status == 200 and a.start >= back)
    assert again - streaming < 2.0
    assert run.notes["retried"].status == 200, run.notes["retried"]
    acknowledged = {a.id for a in run.attempts if a.status == 200 and a.start >= back}
    assert acknowledged <= run.notes["on_standby"]


@pytest.fixture(scope="module")
def frozen(bindir, tmp_path_factory):
    """One run of frozen_primary, checked by the tests below."""
    return frozen_primary(bindir, str(tmp_path_factory.mktemp("frozen") / "service"))


def test_a_frozen_primary_503s_then_the_promoted_standby_takes_over(frozen):
    run = frozen
    check_truth(run)
    [(_, frozen_at, promoted)] = run.events
    assert any(a.status == 503 and frozen_at <= a.start < promoted for a in run.attempts)
    assert not any(a.status == 200 and frozen_at + 0.1 <= a.start and a.end < promoted
                   for a in run.attempts), "a create was acknowledged by a frozen primary"
    [(_, again, _, _)] = run.rows()
    # Each new connection first spends connect_timeout (2 s) on the frozen host.
    assert again is not None and again < 5.0, f"200s again {again} s after the promotion"
    check_ready(run)


def test_a_frozen_primary_every_answer_within_the_deadline_and_a_half(frozen):
    longest = tally(frozen.attempts, frozen.stored)["longest"]
    assert longest < DEADLINE + 1.5, f"an answer took {longest:.2f} s"


def test_a_physical_backup_restored_as_the_primary_then_db_rebase(bindir):
    """A base backup (or a disk snapshot) started as the primary keeps the server's identity
    and timeline, so the store cannot see that positions after the backup were lost and
    may be handed out again; 'plant-store db rebase' moves them past (found by the hostile
    pass: a held cursor skipped 10 of 60 new plants)."""
    from plant_store.stores.postgres import PostgresStore
    from plant_store.stores.records import Plant
    from support.pgcluster import DATABASE, Node
    from support.servers import run_cli

    def walk(store, cursor=0):
        seen = []
        while cursor is not None:
            page, cursor = store.page(cursor, 7)
            seen += [p.id for p in page]
        return seen

    primary = Node(bindir, "primary")
    restored = None
    try:
        primary.start()
        primary.sql(f"CREATE DATABASE {DATABASE}")
        with PostgresStore(primary.url(DATABASE)) as store:
            for n in range(10):
                store.create(Plant(n, "kept"))
            restored = Node(bindir, "restored", source=primary)  # the backup
            for n in range(10, 20):
                store.create(Plant(n, "lost"))
            _, held = store.page(0, 15)  # a client's cursor, into what will be lost
        primary.kill()
        os.unlink(os.path.join(restored.data, "standby.signal"))  # restored as a primary
        restored.start()
        rebased = run_cli("db", "rebase", "--database-url", restored.url(DATABASE))
        assert rebased.returncode == 0, rebased.stderr
        with PostgresStore(restored.url(DATABASE)) as store:
            for n in range(100, 120):
                store.create(Plant(n, "new"))
            assert walk(store) == [*range(10), *range(100, 120)]
            assert walk(store, held) == list(range(100, 120))  # none skipped
    finally:
        primary.cleanup()
        if restored is not None:
            restored.cleanup()
