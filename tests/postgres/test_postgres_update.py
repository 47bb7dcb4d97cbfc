"""Updates, conditional deletes and the tag filter on PostgreSQL: the compare and set
(exactly one of two conditional updates wins, across instances), truthful 503s when a
write's outcome is unknown, the request's deadline, and migrations 0006, 0007 and 0008."""

import threading
import time

import psycopg
import pytest
import webtest

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.http.etags import etag
from plant_store.stores import PreconditionFailed, StoreUnavailable
from plant_store.stores.postgres import PostgresStore, schema
from plant_store.stores.postgres import store as pg_store
from plant_store.stores.records import ANY, Plant, Preconditions
from plant_store.tokens import TokenFile
from support.pgserver import a_postgres_server
from support.servers import Server

pytestmark = pytest.mark.slow  # real servers and PostgreSQL: .ci/run runs them after the suite
NEVER = Preconditions(if_match=frozenset())  # If-Match naming no version at all


def if_match(*versions):
    return Preconditions(if_match=frozenset(versions))


@pytest.fixture
def store(database_url):
    store = PostgresStore(database_url, timeout=2)
    yield store
    store.close()


def test_update_semantics(store):
    for plant_id in (3, 1, 2):
        store.create(Plant(plant_id, f"p{plant_id}", "old"))
    assert store.update(Plant(9, "x")) is None and store.get(9) is None
    done, wrote = store.update(Plant(1, "new"))
    assert (done.plant, wrote) == (Plant(1, "new"), True) and done == store.fetch(1)
    assert store.update(Plant(1, "new"), NEVER) == (done, False)
    with pytest.raises(PreconditionFailed):
        store.update(Plant(1, "newer"), if_match("p1"))
    assert store.page(0, 10)[0] == [Plant(3, "p3", "old"), Plant(1, "new"),
                                    Plant(2, "p2", "old")]
    assert [p.id for p in store.page(0, 10, "old")[0]] == [3, 2]
    store.update(Plant(1, "new", "old"))
    page, after = store.page(0, 2, "old")
    assert [p.id for p in page] == [3, 1]
    assert [p.id for p in store.page(after, 2, "old")[0]] == [2]
    assert store.page(0, 10, "OLD") == ([], None)


def test_conditional_delete(store):
    store.create(Plant(1, "a", "t"))
    with pytest.raises(PreconditionFailed):
        store.delete(1, NEVER)
    assert store.get(1) == Plant(1, "a", "t")
    assert store.delete(1, if_match(store.fetch(1).version)) is True
    assert store.delete(1, Preconditions(if_match=ANY)) is False


def test_a_long_tag_is_indexed(store):
    """The index is on the tag's digest: a btree entry could not hold a 10 kB tag."""
    tag = "t" * 10_000
    store.create(Plant(1, "a", tag))
    assert store.page(0, 10, tag)[0] == [Plant(1, "a", tag)]


def test_the_tag_page_is_a_range_of_the_index(database_url, store):
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO plant_store_plants (id, name, tag, position) "
                     "SELECT n, 'p'::bytea, convert_to('tag ' || (n % 1000), 'UTF8'), n - 1000000 "
                     "FROM generate_series(1, 50000) AS n")
        conn.execute("ANALYZE plant_store_plants")
        plan = "\n".join(row[0] for row in conn.execute(
            "EXPLAIN " + pg_store.QUERIES["page_tag"],
            {"tag": b"tag 7", "start": -10**7, "limit": 101}))
    assert "plant_store_plants_tag" in plan, plan
    # Positions below any the store hands out: the rows were not made by creates.
    assert [p.id for p in store.page(-10**7, 3, "tag 7")[0]] == [7, 1007, 2007]


@pytest.mark.parametrize("previous", [5, 6, 7])
def test_the_previous_release_serves_beside_migrations_0006_to_0008(
        database_url, store, monkeypatch, previous):
    """0006, 0007 and 0008 are expand steps: an instance that knows only the ones before
    is not refused."""
    with psycopg.connect(database_url) as conn:
        assert {6, 7, 8} <= schema.applied(conn)
        monkeypatch.setattr(schema, "newest", lambda: previous)
        assert schema.too_new(conn) is None


def test_an_update_by_a_writer_that_knows_no_revisions_still_moves_the_version(store,
                                                                              database_url):
    """Migration 0007's trigger counts every change of name or tag, whoever writes it (an
    instance of the release before, which never sets rev): a stale If-Match stays stale.
    A write that changes nothing (a replay) keeps the version."""
    store.create(Plant(1, "a", "t"))
    before = store.fetch(1).version
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE plant_store_plants SET name = 'b' WHERE id = 1")
        conn.execute("UPDATE plant_store_plants SET name = 'a' WHERE id = 1")
        conn.commit()
    assert store.fetch(1).plant == Plant(1, "a", "t") and store.fetch(1).version != before
    after = store.fetch(1).version
    with pytest.raises(PreconditionFailed):
        store.update(Plant(1, "c", "t"), if_match(before))
    assert store.create(Plant(1, "a", "t")) == (Plant(1, "a", "t"), False)
    assert store.fetch(1).version == after


def test_a_writer_that_knows_no_stamps_still_stamps_each_write(store, database_url):
    """Migration 0008 stamps every create (the column's default) and every change of name
    or tag (0007's trigger), whoever writes it: the release before writes no stamp, and a
    write of its after a restore still has a version no earlier write had. Its own ETags
    ("position.rev") name no version of this release's (412, never misread)."""
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO plant_store_plants (id, name, tag, position) "
                     "VALUES (1, 'a', NULL, 1)")
        conn.commit()
        stamps = [conn.execute("SELECT stamp FROM plant_store_plants").fetchone()[0]]
        for name in ("b", "a", "a"):
            conn.execute("UPDATE plant_store_plants SET name = %s WHERE id = 1", [name])
            conn.commit()
            stamps.append(conn.execute("SELECT stamp FROM plant_store_plants").fetchone()[0])
        rev = conn.execute("SELECT rev FROM plant_store_plants").fetchone()[0]
    assert 0 not in stamps and len(set(stamps[:3])) == 3 and stamps[3] == stamps[2]
    version = store.fetch(1).version
    assert version.count(".") == 2 and version.startswith("1.2.")
    with pytest.raises(PreconditionFailed):
        store.update(Plant(1, "c"), if_match(f"1.{rev}"))  # the previous release's ETag


class LosesTheAnswer(PostgresStore):
    """The first update's commit goes through, and its answer is lost (a broken connection);
    ``meanwhile`` runs before the store tries again."""

    meanwhile = None

    def _attempt(self, name, *args, **kwargs):
        answer = super()._attempt(name, *args, **kwargs)
        if name == "update" and not getattr(self, "lost", False):
            self.lost = True
            if self.meanwhile:
                self.meanwhile()
            raise pg_store._Unsettled()
        return answer


def test_a_retry_after_a_lost_answer_meets_its_own_update(database_url):
    with LosesTheAnswer(database_url, timeout=2) as store:
        store.create(Plant(1, "a"))
        before = store.fetch(1).version
        done, wrote = store.update(Plant(1, "b"), if_match(before))
        assert (done.plant, wrote) == (Plant(1, "b"), True) and done.version != before
        assert store.fetch(1) == done


def test_an_unknown_outcome_is_never_called_a_412(database_url, store):
    """The lost update went through, and another client changed the plant before the
    retry: the retry cannot tell whether the first was applied, so the 503 says unknown."""
    with LosesTheAnswer(database_url, timeout=2) as losing:
        losing.meanwhile = lambda: store.update(Plant(1, "c"))
        losing.create(Plant(1, "a"))
        with pytest.raises(StoreUnavailable) as unavailable:
            losing.update(Plant(1, "b"), if_match(losing.fetch(1).version))
        assert unavailable.value.unknown
        assert store.get(1) == Plant(1, "c")


def test_an_update_waiting_on_a_locked_row_ends_by_the_deadline(database_url, store):
    store.create(Plant(1, "a"))
    with psycopg.connect(database_url) as conn:
        conn.execute("SELECT * FROM plant_store_plants WHERE id = 1 FOR UPDATE")
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            store.update(Plant(1, "b"))
        assert time.monotonic() - started < 2 + 1.5
    assert store.get(1) == Plant(1, "a")


def test_two_instances_sixteen_threads_one_linear_history(tmp_path, database_url):
    """16 clients on 2 instances read the plant and update it with If-Match, again and again:
    every 200 moves the plant from the state its client read (no two from the same one),
    together one chain from the first plant to the last; every other answer is 412."""
    token_file = tmp_path / "tokens.json"
    token = TokenFile(str(token_file)).add("t")
    servers = [Server(tmp_path / f"s{n}", "--store", "postgresql", "--database-url",
                      database_url, "--token-file", str(token_file), "--threads", "8")
               for n in range(2)]
    try:
        assert servers[0].request("POST", "/plants", {"id": 1, "name": "start"},
                                  token=token)[0] == 200
        start = servers[0].request("GET", "/plants/1", token=token)[1]["ETag"]
        won, lost, other = [], [], []
        barrier = threading.Barrier(16)

        def client(n):
            server = servers[n % 2]
            barrier.wait()
            for round_ in range(15):
                status, headers, _ = server.request("GET", "/plants/1", token=token)
                assert status == 200
                name = f"client {n} round {round_}"
                status, answer, body = server.request(
                    "PUT", "/plants/1", {"name": name}, token=token,
                    headers={"If-Match": headers["ETag"]})
                if status == 200:
                    won.append((headers["ETag"], answer["ETag"]))
                elif status == 412:
                    lost.append(name)
                else:
                    other.append((status, body))

        threads = [threading.Thread(target=client, args=(n,)) for n in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not any(thread.is_alive() for thread in threads)
        assert other == []
        assert len(won) + len(lost) == 16 * 15 and won and lost
        steps = dict(won)
        assert len(steps) == len(won), "two updates won from the same state"
        at, chain = start, 0
        while at in steps:
            at, chain = steps[at], chain + 1
        assert chain == len(won), "the updates that won are not one history"
        assert servers[1].request("GET", "/plants/1", token=token)[1]["ETag"] == at
    finally:
        for server in servers:
            server.stop()


def test_rows_of_another_tag_with_the_same_digest_are_dropped_and_the_page_filled(store):
    """The query finds a tag's rows by md5; a tag made to collide must not show up, and the
    page is still full, its cursor right."""
    for plant_id in range(6):
        store.create(Plant(plant_id, f"p{plant_id}", "t"))
    asked = []
    real = store._page_rows

    def colliding(query, params, op):
        rows = real(query, params, op)
        asked.append(params["start"])
        # every other row as if it were of another tag with the same digest
        return [(i, n, b"other" if i % 2 else t, pos) for i, n, t, pos in rows]

    store._page_rows = colliding
    page, after = store.page(0, 2, "t")
    assert [p.id for p in page] == [0, 2] and len(asked) > 1
    page, after = store.page(after, 2, "t")
    assert [p.id for p in page] == [4] and after is None


@pytest.fixture(scope="module")
def lonely():
    """A server of this module's own, whose synchronous standby is set per test: a standby
    that never connects is what a primary is once its synchronous standby has gone."""
    yield from a_postgres_server()


def standby(server, names):
    with server.connect(autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.2)


@pytest.fixture
def lonely_url(lonely):
    standby(lonely, "")
    yield lonely.create_database("updates")
    standby(lonely, "")
    lonely.drop_database("updates")


def test_an_update_the_standby_never_confirms_is_503_unknown_and_its_retry_is_safe(
        lonely, lonely_url, tmp_path):
    tokens = TokenFile(str(tmp_path / "tokens.json"))
    token = tokens.add("t")
    with PostgresStore(lonely_url, timeout=1) as store:
        app = webtest.TestApp(create_app(Config(store="postgresql", database_url=lonely_url),
                                         store=store, tokens=tokens),
                              extra_environ={"HTTP_AUTHORIZATION": f"Bearer {token}"})
        store.create(Plant(1, "a"))
        before = etag(store.fetch(1).version)
        standby(lonely, "nobody")
        started = time.monotonic()
        answer = app.put_json("/plants/1", {"name": "b"}, headers={"If-Match": before},
                              status=503)
        assert time.monotonic() - started < 1 + 1.5
        assert "may have been updated" in answer.json["message"]
        assert "not changed" not in answer.json["message"]
        # Committed here, unconfirmed there: the same request again must not say 200 on the
        # strength of that commit (the plant equals the body, and nothing would be written):
        # its write over itself waits for the standby as well.
        answer = app.put_json("/plants/1", {"name": "b"}, headers={"If-Match": before},
                              status=503)
        assert "may have been updated" in answer.json["message"]
        standby(lonely, "")
        answer = app.put_json("/plants/1", {"name": "b"}, headers={"If-Match": before},
                              status=200)
        assert answer.headers["ETag"] == etag(store.fetch(1).version) != before
