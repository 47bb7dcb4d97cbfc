"""Every answer of the PostgreSQL store true, and none waiting without bound, on one real
server: commits that wait for a synchronous standby that has gone, such a wait cancelled,
a session ended after its commit, a frozen backend, dead pooled connections, prepared
statements, the session's statement_timeout, and positions after the data moves.

A server with ``synchronous_standby_names`` naming a standby that never connects is what
a primary is once its synchronous standby has gone: each commit is made locally, then
waits for a confirmation that never comes. The real standby, Patroni and pgbouncer are in
the topology tests (test_failover.py, test_patroni.py, test_pgbouncer.py)."""

import contextlib
import itertools
import os
import signal
import subprocess
import threading
import time

import psycopg
import pytest
import webtest

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.stores import StoreError, StoreUnavailable
from plant_store.stores.postgres import PostgresStore
from plant_store.stores.records import Plant
from plant_store.tokens import TokenFile
from support.pgserver import PostgresServer, a_postgres_server
from support.servers import Server, ended


@pytest.fixture(scope="module")
def lonely():
    """A server of this module's own: its synchronous standby is set per test."""
    yield from a_postgres_server()


def standby(server, names):
    """Make commits wait for ``names`` ('' for none) from now on."""
    with server.connect(autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.2)  # each backend reads the file at its next command


@pytest.fixture
def url(lonely):
    standby(lonely, "")
    yield lonely.create_database("truth")
    standby(lonely, "")
    lonely.drop_database("truth")


def waiting_backends(server, event="SyncRep"):
    with server.connect(autocommit=True) as conn:
        return [pid for (pid,) in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE wait_event = %s", [event])]


def waiting_for_the_standby(server, work):
    """``work`` begun in a thread (:func:`in_thread`), once its commit waits for a
    synchronous standby (within 2 s): the thread, its outcome's box, and the waiting
    backends' pids."""
    thread, box = in_thread(work)
    deadline = time.monotonic() + 2
    while not (waiting := waiting_backends(server)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return thread, box, waiting


def in_thread(work):
    box = []
    thread = threading.Thread(target=lambda: box.append(_outcome(work)))
    thread.start()
    return thread, box


def _outcome(work):
    try:
        return work()
    except StoreUnavailable as exc:
        return exc


def test_a_commit_the_standby_never_confirms_is_503_unknown_within_the_deadline(lonely, url,
                                                                                  tmp_path):
    tokens = TokenFile(str(tmp_path / "tokens.json"))
    token = tokens.add("t")
    with PostgresStore(url, timeout=1) as store:
        app = webtest.TestApp(create_app(Config(store="postgresql", database_url=url),
                                         store=store, tokens=tokens))
        standby(lonely, "nobody")
        started = time.monotonic()
        answer = app.post_json("/plants", {"id": 1, "name": "Monstera"}, status=503,
                               headers={"Authorization": f"Bearer {token}"})
        assert time.monotonic() - started < 1 + 1.5
        assert "may have been created" in answer.json["message"]
        assert "not created" not in answer.json["message"]
        standby(lonely, "")
        # It was committed locally, so "not created" would have been false: a replay.
        assert store.create(Plant(1, "Monstera")) == (Plant(1, "Monstera"), False)


@pytest.mark.slow
def test_a_cancelled_wait_for_the_standby_is_never_acknowledged(lonely, url):
    with PostgresStore(url, timeout=3) as store:
        standby(lonely, "nobody")
        thread, box, [pid] = waiting_for_the_standby(
            lonely, lambda: store.create(Plant(2, "Pilea")))
        with lonely.connect(autocommit=True) as conn:
            conn.execute("SELECT pg_cancel_backend(%s)", [pid])  # success, with a WARNING
        thread.join(10)
        [outcome] = box
        assert isinstance(outcome, StoreUnavailable) and outcome.unknown, outcome


@pytest.mark.slow
def test_a_session_ended_after_its_commit_is_unknown_not_not_created(lonely, url):
    with PostgresStore(url, timeout=2) as store:
        standby(lonely, "nobody")
        thread, box, waiting = waiting_for_the_standby(
            lonely, lambda: store.create(Plant(3, "Calathea")))
        with lonely.connect(autocommit=True) as conn:
            for pid in waiting:
                conn.execute("SELECT pg_terminate_backend(%s)", [pid])
        thread.join(10)
        [outcome] = box
        assert isinstance(outcome, StoreUnavailable) and outcome.unknown, outcome
        standby(lonely, "")
        assert store.get(3) == Plant(3, "Calathea")  # committed: "not created" was false


def test_a_delete_the_standby_never_confirms_is_unknown_and_its_retry_says_gone(lonely, url):
    with PostgresStore(url, timeout=1) as store:
        store.create(Plant(4, "Fern"))
        standby(lonely, "nobody")
        with pytest.raises(StoreUnavailable) as refused:
            store.delete(4)
        assert refused.value.unknown
        standby(lonely, "")
        assert store.get(4) is None and not store.delete(4)


@pytest.mark.slow
def test_ready_says_not_ready_within_a_second_while_commits_wait(lonely, url):
    with PostgresStore(url, timeout=5) as store:
        store.check()
        standby(lonely, "nobody")
        for _ in range(3):  # the first probe, and those that find it still running
            started = time.monotonic()
            with pytest.raises(StoreUnavailable) as refused:
                store.check()
            assert time.monotonic() - started < 1.2
            assert "did not confirm a write" in str(refused.value) or (
                "not confirmed" in str(refused.value))
        standby(lonely, "")
        deadline = time.monotonic() + 5
        while True:
            try:
                store.check()
                break
            except StoreUnavailable:
                assert time.monotonic() < deadline, "never ready again"
                time.sleep(0.1)


@pytest.mark.slow
def test_ready_answers_at_once_while_every_connection_waits(lonely, url):
    with PostgresStore(url, pool_size=2, timeout=3) as store:
        standby(lonely, "nobody")
        threads = [in_thread(lambda n=n: store.create(Plant(10 + n, "x")))[0] for n in range(4)]
        time.sleep(0.3)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            store.check()
        assert time.monotonic() - started < 1.2
        for thread in threads:
            thread.join(10)


@pytest.mark.slow
def test_sigterm_returns_within_the_deadline_while_a_commit_waits(lonely, url, tmp_path):
    token_file = tmp_path / "tokens.json"
    token = TokenFile(str(token_file)).add("t")
    server = Server(tmp_path / "s", "--store", "postgresql", "--database-url", url,
                    "--token-file", str(token_file), "--database-timeout", "2")
    try:
        assert server.request("POST", "/plants", {"id": 5, "name": "a"}, token)[0] == 200
        standby(lonely, "nobody")
        thread = threading.Thread(target=lambda: server.request(
            "POST", "/plants", {"id": 6, "name": "b"}, token, timeout=15))
        thread.start()
        time.sleep(0.5)
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        ended(server.proc, 10)
        assert time.monotonic() - started < 2 + 1 + 1.5
        assert server.proc.returncode == 0, "".join(server.stderr)
        thread.join(15)
    finally:
        server.stop()


def test_dead_pooled_connections_cost_a_retry_not_an_error(postgres, database_url):
    with PostgresStore(database_url, pool_size=4) as store:
        threads = [in_thread(lambda n=n: store.create(Plant(n, "x")))[0] for n in range(8)]
        for thread in threads:
            thread.join(10)
        dbname = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
        with postgres.connect(autocommit=True) as conn:  # every pooled session ends
            ended = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                                 " WHERE datname = %s", [dbname]).fetchone()[0]
        assert ended >= 2  # the pool grew past one
        for n in range(8):  # each would meet a dead connection first
            assert store.create(Plant(100 + n, "after")) == (Plant(100 + n, "after"), True)
            assert store.get(n) == Plant(n, "x")


@pytest.mark.slow
def test_a_frozen_backend_is_bounded_by_the_deadline(postgres, database_url):
    with PostgresStore(database_url, pool_size=1, timeout=1) as store:
        store.create(Plant(1, "before"))
        dbname = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
        with postgres.connect(autocommit=True) as conn:
            [pid] = [p for (p,) in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s", [dbname])]
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(StoreUnavailable) as refused:
                store.create(Plant(2, "frozen"))
            assert refused.value.unknown
            assert time.monotonic() - started < 1 + 1 + 1.5  # deadline, then the socket
        finally:
            os.kill(pid, signal.SIGCONT)
        assert store.create(Plant(3, "after")) == (Plant(3, "after"), True)


@pytest.mark.parametrize("prepared", [True, False])
def test_prepared_statements_only_where_the_setting_allows(postgres, database_url, prepared):
    bound_by_the_database(postgres, database_url, "5s")  # what transaction mode asks for
    with PostgresStore(database_url, pool_size=1, prepared_statements=prepared) as store:
        for n in range(8):  # psycopg prepares a statement on its fifth run
            store.create(Plant(n, "x"))
            store.page(0, 10)
        with store._pool.connection() as conn:
            count = conn.execute("SELECT count(*) FROM pg_prepared_statements",
                                 prepare=False).fetchone()[0]
        assert (count > 0) == prepared


def test_statement_timeout_is_set_unless_the_database_bounds_it_already(postgres, database_url):
    def session_timeout(store):
        with store._pool.connection() as conn:
            return conn.execute("SHOW statement_timeout", prepare=False).fetchone()[0]

    with PostgresStore(database_url, statement_timeout=3) as store:
        assert session_timeout(store) == "3s"
    bound_by_the_database(postgres, database_url, "1s")
    with PostgresStore(database_url, statement_timeout=3) as store:
        assert session_timeout(store) == "1s"  # tighter already: left as it is


def test_without_prepared_statements_the_timeout_must_be_every_sessions(postgres,
                                                                        database_url):
    """Behind a pooler in transaction mode a SET holds on one server connection only; the
    store refuses to start rather than run unbounded statements on the others."""
    with pytest.raises(StoreError, match=r"statement_timeout must be the role's own, at "
                       r"most 3000 ms \(it is unbounded\): ALTER ROLE"):
        PostgresStore(database_url, statement_timeout=3, prepared_statements=False)
    bound_by_the_database(postgres, database_url, "5s")
    with pytest.raises(StoreError, match=r"\(it is 5000 ms\)"):
        PostgresStore(database_url, statement_timeout=3, prepared_statements=False)
    bound_by_the_database(postgres, database_url, "3s")
    PostgresStore(database_url, statement_timeout=3, prepared_statements=False).close()


def bound_by_the_database(postgres, database_url, bound):
    dbname = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
    with postgres.connect(autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{dbname}" SET statement_timeout = \'{bound}\'')


def walk(store):
    seen, cursor = [], 0
    while cursor is not None:
        page, cursor = store.page(cursor, 2)
        seen += [p.name for p in page]
    return seen


def test_positions_continue_above_the_old_ones_on_a_new_server(database_url):
    """As after pg_restore into a fresh cluster: the stored positions are far ahead of this
    server's transaction ids, and the clock names another server."""
    with PostgresStore(database_url) as store:
        for n in range(3):
            store.create(Plant(n, f"old {n}"))
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("UPDATE plant_store_plants SET position = position + 1000000000000")
            conn.execute("UPDATE plant_store_batch_clock SET system_identifier = 1")
            top = conn.execute("SELECT max(position) FROM plant_store_plants").fetchone()[0]
        _, held = store.page(0, 2)  # a cursor a client holds across the move
        assert walk(store) == ["old 0", "old 1", "old 2"]
        for n in range(3, 6):
            store.create(Plant(n, f"new {n}"))
        assert walk(store) == [f"old {n}" for n in range(3)] + [f"new {n}" for n in range(3, 6)]
        rest, _ = store.page(held, 10)
        assert [p.name for p in rest] == ["old 2", "new 3", "new 4", "new 5"]
        with psycopg.connect(database_url, autocommit=True) as conn:
            low = conn.execute("SELECT min(position) FROM plant_store_plants WHERE id >= 3"
                               ).fetchone()[0]
        assert low > top + 2**32 - 1  # above every old one, with the margin for lost ones


def test_a_new_timeline_moves_the_clock_past_positions_it_may_have_lost(database_url):
    with PostgresStore(database_url) as store:
        store.create(Plant(1, "before"))
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("UPDATE plant_store_batch_clock SET timeline = timeline + 1")
            before = conn.execute("SELECT base FROM plant_store_batch_clock").fetchone()[0]
        store.create(Plant(2, "after"))
        assert walk(store) == ["before", "after"]
        with psycopg.connect(database_url, autocommit=True) as conn:
            after = conn.execute("SELECT base FROM plant_store_batch_clock").fetchone()[0]
        assert after >= before + 2**32


@pytest.mark.slow
def test_pg_dump_and_pg_restore_into_a_fresh_cluster_keep_creation_order(lonely, tmp_path):
    """The standard backup and major upgrade: the old cluster had used more transaction ids
    than the fresh one has, so positions taken from the new server's counter alone would
    list new plants first or collide with old positions."""
    old_url = lonely.create_database("dumped")
    with psycopg.connect(old_url, autocommit=True) as conn:
        for _ in range(1500):  # the old cluster's history: ids the new one has not used
            conn.execute("SELECT pg_current_xact_id()")
    with PostgresStore(old_url) as store:
        for n in range(20):
            store.create(Plant(n, f"old {n}"))
    dump = str(tmp_path / "plants.dump")
    subprocess.run([os.path.join(lonely.bindir, "pg_dump"), "-Fc", "-f", dump, old_url],
                   check=True, timeout=60)
    fresh = PostgresServer(lonely.bindir)
    try:
        fresh.start()
        new_url = fresh.create_database("restored")
        subprocess.run([os.path.join(fresh.bindir, "pg_restore"), "--no-owner", "-d", new_url,
                        dump], check=True, timeout=60)
        with PostgresStore(new_url) as store:
            _, held = store.page(0, 5)  # a cursor a client took before the move
            for n in range(20, 40):
                store.create(Plant(n, f"new {n}"))
            assert walk(store) == ([f"old {n}" for n in range(20)]
                                   + [f"new {n}" for n in range(20, 40)])
            rest, _ = store.page(held, 100)
            assert [p.id for p in rest] == list(range(5, 40))
    finally:
        fresh.cleanup()
        lonely.drop_database("dumped")


@pytest.mark.slow
def test_a_create_committed_then_a_rebase_that_times_out_is_unknown(lonely, url):
    """What kill -9 of a primary and a promotion do (seen in test_failover.py and
    test_patroni.py): a create commits and its session ends before it hears so (unsettled);
    the retry finds the clock on another timeline and rebases; the rebase cannot finish in
    time. The plant is stored, so the 503 must say "outcome unknown", not "not created"."""
    with PostgresStore(url, timeout=2) as store:
        store.create(Plant(1, "first"))
        standby(lonely, "nobody")  # the commit is made, then waits for a standby
        thread, box = in_thread(lambda: store.create(Plant(2, "x")))
        try:
            with psycopg.connect(url) as admin:
                deadline = time.monotonic() + 1.5
                while not (waiting := waiting_backends(lonely)):
                    assert time.monotonic() < deadline, "the create never waited"
                    time.sleep(0.02)
                admin.execute("SET synchronous_commit = local")
                # What a promotion does to the clock: its timeline is no longer this one's.
                admin.execute("UPDATE plant_store_batch_clock SET timeline = timeline + 1")
                admin.commit()
                # A rebase that cannot finish in time (another instance's, a slow server).
                admin.execute("SELECT FROM plant_store_batch_clock FOR UPDATE")
                with lonely.connect(autocommit=True) as other:
                    other.execute("SELECT pg_terminate_backend(%s)", [min(waiting)])
                thread.join(10)
                admin.rollback()
        finally:
            standby(lonely, "")
            thread.join(10)
        [outcome] = box
        assert store.get(2) == Plant(2, "x")  # committed before its session ended
        assert isinstance(outcome, StoreUnavailable), outcome
        assert outcome.unknown, f"'not created' for a committed create: {outcome}"


@pytest.mark.slow
@pytest.mark.parametrize("operation", ["create", "delete"])
def test_a_write_cancelled_behind_an_unconfirmed_one_on_its_row_is_not_known_undone(
        lonely, url, operation):
    """A client's retry of a write whose commit waits for a standby: the retry waits on the
    first one's row lock until statement_timeout cancels it. The first one committed
    locally, so "not created" or "kept" would be false; found by the hostile pass."""
    with PostgresStore(url, timeout=3, statement_timeout=1) as store:
        store.create(Plant(1, "there"))
        standby(lonely, "nobody")
        try:
            work = ((lambda: store.create(Plant(7, "Fern"))) if operation == "create"
                    else (lambda: store.delete(1)))
            first, first_box = in_thread(work)
            time.sleep(0.3)
            second, second_box = in_thread(work)
            first.join(10)
            second.join(10)
        finally:
            standby(lonely, "")
        for outcome in (first_box[0], second_box[0]):
            assert isinstance(outcome, StoreUnavailable), outcome
            assert outcome.unknown, f"said not done, but it was: {outcome}"
        if operation == "create":
            assert store.get(7) == Plant(7, "Fern")
        else:
            assert store.get(1) is None


@pytest.mark.slow
def test_ready_is_busy_only_once_a_request_has_waited_for_a_connection(url):
    """A moment's wait for a pooled connection under load is not a reason to take the
    instance out (the hostile pass saw 4 of 50 probes fail on a healthy loaded server);
    requests held behind a table lock for over half a second are. (Reads here: creates
    wait for their batch, one connection's worth, not for connections.)"""
    with PostgresStore(url, pool_size=2, timeout=5) as store:
        stop = threading.Event()

        def churn(n):
            for i in itertools.count():
                if stop.is_set():
                    return
                store.create(Plant(n * 100000 + i, "x"))

        workers = [threading.Thread(target=churn, args=(n,)) for n in range(1, 9)]
        for worker in workers:
            worker.start()
        try:
            for _ in range(20):  # 8 threads on 2 connections: always someone waiting
                store.check()
                time.sleep(0.05)
        finally:
            stop.set()
            for worker in workers:
                worker.join(10)
        with psycopg.connect(url) as holder:
            holder.execute("LOCK TABLE plant_store_plants IN ACCESS EXCLUSIVE MODE")
            threads = [in_thread(lambda n=n: store.get(n))[0] for n in range(4)]
            time.sleep(0.8)
            with pytest.raises(StoreUnavailable, match=r"2 requests wait for one, the "
                               r"first for 0\.\d s") as busy:
                store.check()
            assert busy.value.cause == "busy"
        for thread in threads:
            thread.join(10)


def test_many_probes_behind_a_stuck_one_answer_within_its_wait(url):
    """Probes arriving while the running one is stuck past its wait answer at once (found
    by the hostile pass: the 14th of 14 concurrent /ready took 1.8 s, and /health waited
    behind them on the probe threads for 3.1 s)."""
    with PostgresStore(url) as store, psycopg.connect(url) as holder:
        store.check()
        holder.execute("LOCK TABLE plant_store_probe IN ACCESS EXCLUSIVE MODE")
        took = []

        def probe():
            started = time.monotonic()
            with contextlib.suppress(StoreUnavailable):
                store.check()
            took.append(time.monotonic() - started)

        threads = [threading.Thread(target=probe) for _ in range(14)]
        for thread in threads:
            thread.start()
            time.sleep(0.05)
        for thread in threads:
            thread.join(10)
        assert max(took) < 1.0, took
        took.clear()
        started = time.monotonic()
        for _ in range(6):  # one after another, as two threads serving probes take them
            probe()
        assert time.monotonic() - started < 1.5, took
