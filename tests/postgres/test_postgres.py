"""The PostgreSQL store's own traps, against a real server (tests/support/pgserver.py): commit order
is not sequence order, ON CONFLICT under a stale snapshot, leases across instances, a
database that goes away and comes back, statements that would wait forever, migrations
started together. The store contract itself runs on every store (tests/support/suites/)."""

import threading
import time

import psycopg
import psycopg.conninfo
import pytest

from plant_store.stores import Conflict, StoreError, StoreUnavailable
from plant_store.stores.postgres import PostgresStore, schema
from plant_store.stores.postgres.schema import QUERIES
from plant_store.stores.records import Plant
from support.servers import run_cli


@pytest.fixture
def pg(database_url):
    with PostgresStore(database_url, statement_timeout=2) as store:
        yield store


def held_create(database_url, plant):
    """A create of ``plant`` run by hand in a transaction left open: the caller commits."""
    conn = psycopg.connect(database_url)
    conn.execute(QUERIES["create"], {
        "ids": [plant.id], "names": [plant.name.encode()], "tags": [None], "delivery_ids": [],
        "delivery_plants": [], "urls": [], "bodies": [], "lock_timeout": "0"})
    return conn


def walk(store, limit=1):
    seen, cursor = [], 0
    while cursor is not None:
        page, cursor = store.page(cursor, limit)
        seen += page
    return seen


def test_a_page_never_shows_a_plant_past_a_create_still_in_flight(pg, database_url):
    """A transaction that took its position first can commit last: a listing that showed
    the later one would hand out a cursor past the earlier one, which it would then skip."""
    pg.create(Plant(1, "before"))
    slow = held_create(database_url, Plant(2, "slow"))  # its position comes first
    pg.create(Plant(3, "fast"))  # committed, but after the slow one's position
    assert walk(pg) == [Plant(1, "before")]
    slow.commit()
    slow.close()
    assert walk(pg) == [Plant(1, "before"), Plant(2, "slow"), Plant(3, "fast")]


def test_a_create_racing_a_commit_of_the_same_id_sees_it_in_one_run(pg, database_url):
    """The statement waits for the other transaction's row lock, then reads the row at its
    latest version (ON CONFLICT DO UPDATE), though its snapshot predates that commit."""
    runs = []
    original = pg._run

    def counting(name, *args):
        runs.append(name)
        return original(name, *args)

    pg._run = counting
    other = held_create(database_url, Plant(5, "theirs"))
    outcome = []
    racer = threading.Thread(target=lambda: outcome.append(_try_create(pg, Plant(5, "ours"))))
    racer.start()
    time.sleep(0.3)  # the racer now waits on the other transaction's row lock
    other.commit()
    other.close()
    racer.join(timeout=10)
    assert outcome == ["conflict: theirs"]
    # The batch (of one) gave the row BATCH_LOCK_WAIT, then the create ran alone, waiting
    # on the lock until the commit: one run of its own, no retry.
    assert runs == ["create_one", "create_one"]
    assert pg.create(Plant(5, "theirs")) == (Plant(5, "theirs"), False)


def _try_create(store, plant):
    try:
        return store.create(plant)
    except Conflict as exc:
        return f"conflict: {exc.stored.name}"


def test_racing_creates_of_one_id_from_two_instances_have_one_winner(database_url):
    with PostgresStore(database_url) as one, PostgresStore(database_url) as two:
        results = []

        def race(store, n):
            for i in range(20):
                results.append(_try_create(store, Plant(i, f"instance {n}")))

        threads = [threading.Thread(target=race, args=(s, n)) for n, s in enumerate([one, two])]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        created = [r for r in results if isinstance(r, tuple) and r[1]]
        assert len(created) == 20  # each id created exactly once, whoever won
        assert len(one) == 20


def test_a_held_lane_is_skipped_by_other_instances_until_its_lease_ends(database_url):
    hook = "http://127.0.0.1:9/hook"
    with PostgresStore(database_url) as one, PostgresStore(database_url) as two:
        one.create(Plant(1, "a"), (hook,))
        one.create(Plant(2, "b"), (hook,))
        assert one.lanes() == two.lanes() == [hook]
        assert one.hold_lane(hook, lease=0.5)
        assert not two.hold_lane(hook, lease=0.5)
        assert two.lanes() == []  # held by another instance
        first, second = one.lane(hook, 10)
        assert (first.plant_id, second.plant_id) == (1, 2)
        time.sleep(0.7)  # the holder "died": the lease runs out, anyone may take it over
        assert two.hold_lane(hook, lease=30)
        assert not one.hold_lane(hook, lease=30)
        two.settle(first.id, "failed", "HTTP 500", retry_in=30)
        two.free_lane(hook)
        # the oldest is backing off, in the database, for every instance; none goes ahead
        assert one.lanes() == [] and one.lane(hook, 10) == []
        two.settle(first.id, "retry")
        assert [d.id for d in one.lane(hook, 10)] == [first.id, second.id]
        assert one.lane(hook, 10)[0].attempts == 0
        one.settle(first.id, "delivered")
        one.settle(second.id, "dead", "HTTP 410")
        assert one.lanes() == [] and one.deliveries() == []
        assert [d.id for d in one.deliveries(dead=True)] == [second.id]
        with pytest.raises(KeyError):
            one.settle(first.id, "delivered")


@pytest.mark.slow
def test_a_statement_waiting_on_a_lock_is_cancelled_at_the_timeout(database_url):
    with PostgresStore(database_url, statement_timeout=0.5, timeout=2) as store:
        store.create(Plant(1, "locked"))
        with psycopg.connect(database_url) as holder:
            holder.execute("SELECT * FROM plant_store_plants WHERE id = 1 FOR UPDATE")
            started = time.monotonic()
            with pytest.raises(StoreUnavailable) as refused:
                store.delete(1)
            assert time.monotonic() - started < 3
            # It waited on another transaction that might have deleted the plant itself.
            assert refused.value.unknown
        assert store.delete(1)


@pytest.mark.slow
def test_the_database_going_away_is_a_503_and_its_return_needs_no_restart(postgres,
                                                                           database_url):
    with PostgresStore(database_url, timeout=1) as store:
        store.create(Plant(1, "before"))
        postgres.stop()
        try:
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):
                store.create(Plant(2, "while down"))
            with pytest.raises(StoreUnavailable):
                store.check()
            assert time.monotonic() - started < 5
        finally:
            postgres.start()
        deadline = time.monotonic() + 10
        while True:  # the pool replaces its broken connections by itself
            try:
                store.create(Plant(3, "after"))
                break
            except StoreUnavailable:
                assert time.monotonic() < deadline, "the store never recovered"
                time.sleep(0.2)
        assert [p.id for p in walk(store, 10)] == [1, 3]


def test_instances_starting_together_apply_each_migration_once(database_url):
    errors, stores = [], []

    def start():
        try:
            stores.append(PostgresStore(database_url))
        except StoreError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors and len(stores) == 4
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM plant_store_schema").fetchone()[0] == len(
            schema.available())
    for store in stores:
        store.close()


@pytest.mark.slow
def test_db_check_and_migrate_commands(database_url):
    check = run_cli("db", "check", "--database-url", database_url)
    every = ("0001_initial.sql, 0002_failover.sql, 0003_lanes.sql, 0004_batches.sql, "
             "0005_compatibility.sql, 0006_tag_index.sql, 0007_revisions.sql, "
             "0008_write_stamps.sql")
    assert check.returncode == 1 and f"schema version 0; pending: {every}" in check.stdout
    migrate = run_cli("db", "migrate", "--database-url", database_url)
    assert migrate.returncode == 0 and migrate.stdout.strip() == f"applied {every}"
    check = run_cli("db", "check", "--database-url", database_url)
    assert check.returncode == 0 and "schema version 8; nothing pending" in check.stdout
    again = run_cli("db", "migrate", "--database-url", database_url)
    assert again.stdout.strip() == "nothing to apply"


def test_the_password_is_never_shown(database_url):
    url = psycopg.conninfo.make_conninfo(database_url, password="s3cret-pw", dbname="nowhere")
    result = run_cli("db", "check", "--database-url", url)
    assert result.returncode == 2 and "s3cret-pw" not in result.stdout + result.stderr
    with pytest.raises(StoreError) as refused:
        PostgresStore(url, timeout=1)
    assert "s3cret-pw" not in str(refused.value)


def test_a_malformed_url_is_refused_without_showing_it(tmp_path):
    url = "postgresql://postgres:SuperSecretPW@[::1/x"
    result = run_cli("db", "check", "--database-url", url)
    assert result.returncode == 2 and "SuperSecretPW" not in result.stdout + result.stderr
    assert "not a libpq URL" in result.stderr
    serve = run_cli("serve", "--port", "0", "--data-dir", str(tmp_path), "--store",
                    "postgresql", "--database-url", url)
    assert serve.returncode == 2 and "SuperSecretPW" not in serve.stdout + serve.stderr


def test_a_read_only_database_is_503_and_health_says_so(postgres, database_url):
    with PostgresStore(database_url) as store:
        store.create(Plant(1, "a"))
        dbname = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
        with psycopg.connect(postgres.url("postgres"), autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{dbname}" SET default_transaction_read_only = on')
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s", [dbname])  # the pool reconnects read-only
        messages = []
        for n in range(5):  # the first may meet a terminated connection
            with pytest.raises(StoreUnavailable) as refused:
                store.create(Plant(10 + n, "refused"))
            messages.append(str(refused.value))
        assert any("refuses writes" in m for m in messages), messages
        with pytest.raises(StoreUnavailable, match="read-only"):
            store.check()
        assert store.get(1) == Plant(1, "a")


def test_export_refuses_to_leave_out_plants_held_back_by_an_open_transaction(
        pg, database_url):
    import io

    from plant_store.cli import plants as transfer

    pg.create(Plant(1, "listed"))
    with psycopg.connect(database_url) as other:
        other.execute("SELECT pg_current_xact_id()")  # holds the horizon, writes nothing
        pg.create(Plant(2, "held back"))
        with pytest.raises(transfer.TransferError, match="exported 1 plant, but the store "
                                                         "holds 2"):
            transfer.export(pg, io.BytesIO())
    assert transfer.export(pg, io.BytesIO()) == 2  # the transaction ended: all of them


def test_db_migrate_over_a_foreign_table_is_one_line(database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE plant_store_plants (id text PRIMARY KEY, owner text)")
    result = run_cli("db", "migrate", "--database-url", database_url)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "already exists" in result.stderr


def test_a_missing_database_at_start_is_named_as_such(postgres):
    with pytest.raises(StoreError, match="does not exist"):
        PostgresStore(postgres.url("no_such_database"), timeout=1)


def test_attempts_are_counted_before_they_are_made_so_none_goes_past_the_maximum(
        database_url):
    """Each attempt is counted in the database, under the lane's lease, before it is made:
    an instance whose outcome's write outlived its lease (found by the hostile pass: a
    third try with a maximum of two) can neither try again nor let another try too often."""
    hook = "http://127.0.0.1:9/hook"
    with PostgresStore(database_url) as one, PostgresStore(database_url) as two:
        one.create(Plant(1, "a"), (hook,))
        assert one.hold_lane(hook, lease=0.3)
        [delivery] = one.lane(hook, 10)
        assert one.begin_attempt(delivery, 0.3, 2) == 1
        time.sleep(0.4)  # its outcome is slow to be written: the lease ends
        assert two.hold_lane(hook, lease=30)
        [fresh] = two.lane(hook, 10)
        assert two.begin_attempt(fresh, 30, 2) == 2  # the first one's attempt counts
        assert one.begin_attempt(delivery, 0.3, 2) is None  # not its lane any more
        two.settle(fresh.id, "failed", "HTTP 500", retry_in=0)
        assert two.begin_attempt(fresh, 30, 2) == 3  # past the maximum: no third try


def test_an_instance_older_than_a_contract_step_says_not_ready_and_will_not_start(
        database_url):
    """Hostile round 4: an old instance's /ready said ready while it answered every create
    and list with 503 (a later release had renamed what it reads). A contract step now
    names the oldest migration that can serve beside it, and older instances say so."""
    with PostgresStore(database_url) as store:
        store.check()
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("INSERT INTO plant_store_schema (version, name, compatible_from) "
                         "VALUES (99, '0099_future.sql', 99)")
        with pytest.raises(StoreUnavailable, match="needs Plant Store with migration 0099 "
                           "or newer; this version knows up to 0008: upgrade this instance"):
            store.check()
    with pytest.raises(StoreError, match="needs Plant Store with migration 0099"):
        PostgresStore(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:  # an expand step: served
        conn.execute("UPDATE plant_store_schema SET compatible_from = NULL WHERE version = 99")
    with PostgresStore(database_url) as store:
        store.check()


def test_a_contract_step_records_the_version_it_declares(database_url, monkeypatch):
    every = schema.available()
    future = (99, "0099_contract.sql", "-- compatible-from: 99\nSELECT 1;\n")
    monkeypatch.setattr(schema, "available", lambda: [*every, future])
    with psycopg.connect(database_url, autocommit=True) as conn:
        schema.migrate(conn)
        rows = dict(conn.execute("SELECT version, compatible_from FROM plant_store_schema"
                                 " WHERE version >= 5").fetchall())
        assert rows == {5: None, 6: None, 7: None, 8: None, 99: 99}
        assert schema.too_new(conn) is None  # this version knows 99
        monkeypatch.setattr(schema, "available", lambda: every)
        assert "needs Plant Store with migration 0099" in schema.too_new(conn)
