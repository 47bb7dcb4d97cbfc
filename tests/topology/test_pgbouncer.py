"""The PostgreSQL store behind pgbouncer (Debian's, 1.18), in session and in transaction
mode, with pgbouncer's defaults (tests/support/pgbouncer.py): the service starts (no startup
``options``, which pgbouncer refuses), the store contract holds, webhooks are delivered,
a create behind a table lock answers 503 within the deadline, and in transaction mode
(``database_prepared_statements = false``) a mixed load sees no 500s and no prepared
statement errors.

Each mode has one pgbouncer in front of one PostgreSQL server (TCP on 127.0.0.1) for the
module, and each test a fresh database. The scenario functions take the server's extra
arguments and environment, so the same scenarios measure older code too (PYTHONPATH
naming its checkout, from a working directory outside this one: ``python -m`` puts the
working directory first on the path)."""

import itertools
import json
import random
import re
import threading
import time
import types

import pytest

from plant_store.stores.records import Plant
from plant_store.tokens import TokenFile
from support.needs import NO_POSTGRES, needed
from support.pgbouncer import PgBouncer, find_pgbouncer
from support.pgserver import PostgresServer, find_bindir
from support.receiver import SECRET, Receiver, verified
from support.servers import Server
from support.suites.plant_store_contract import *  # noqa: F403 (every test_ of the suite)

# The PlantStore contract (tests/support/suites/plant_store_contract.py), collected here
# again: its ``store`` is the fixture below, a PostgresStore reached through pgbouncer in
# each mode.
STORE_KINDS = ()  # the store fixture below

# Minutes each, a cluster started in a fixture: a timeout of their own (setup.cfg has 300 s).
pytestmark = [pytest.mark.topology, pytest.mark.timeout(900)]

MODES = ["session", "transaction"]
POOL = 4  # the service's database_pool_size
# pgbouncer's default_pool_size. In session mode a service process holds a server
# connection for each pooled connection and one for /ready's prober: with fewer, one of
# them waits in pgbouncer's queue (see test_a_wait_in_pgbouncers_queue_is_bounded...). In
# transaction mode fewer server connections than clients is the point.
BOUNCER_POOL = {"session": POOL + 1, "transaction": POOL}
DEADLINE = 3.0  # database_timeout of the service under test
NO_PGBOUNCER = "pgbouncer is not installed"
PREPARED_ERRORS = re.compile(r"prepared statement \"?_pg\d*_\d+\"?|bind message supplies",
                             re.IGNORECASE)
_names = itertools.count(1)


@pytest.fixture(scope="module")
def pg():
    """A PostgreSQL server on 127.0.0.1, for pgbouncer to reach over TCP."""
    server = PostgresServer(needed(find_bindir(), NO_POSTGRES, "postgresql package",
                                    "PostgreSQL"))
    try:
        server.start(tcp=True)
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="module", params=MODES)
def bouncer(request, pg):
    bouncer = PgBouncer(pg, request.param, pool_size=BOUNCER_POOL[request.param],
                        executable=needed(find_pgbouncer(), NO_PGBOUNCER, "pgbouncer package",
                                           "pgbouncer"))
    try:
        bouncer.start()
        yield bouncer
    finally:
        bouncer.cleanup()


@pytest.fixture
def dbname(pg, bouncer, request):
    """A fresh database, created and dropped on PostgreSQL directly. In transaction mode it
    bounds statements itself, as docs/postgresql-topologies.rst says to (there for the
    role): a session's setting would stay on whichever server connection ran it."""
    # 40: pgbouncer's admin console (RECONNECT) refuses longer names
    name = f"b{next(_names)}_{re.sub(r'[^a-z0-9]+', '_', request.node.name.lower())}"[:40]
    pg.create_database(name)
    if bouncer.pool_mode == "transaction":
        bound_statements(pg, name, "5s")  # the service's statement_timeout by default
    yield name
    pg.drop_database(name)


def bound_statements(pg, dbname, timeout):
    """``ALTER DATABASE ... SET statement_timeout``; None resets it."""
    setting = "RESET statement_timeout" if timeout is None else (
        f"SET statement_timeout = '{timeout}'")
    with pg.connect(autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{dbname}" {setting}')


def prepared(mode):
    return mode == "session"  # transaction mode before pgbouncer 1.21: off


@pytest.fixture
def store(bouncer, dbname):
    """The contract's store: a PostgresStore through pgbouncer."""
    from plant_store.stores.postgres import PostgresStore

    store = PostgresStore(bouncer.url(dbname), pool_size=POOL, timeout=5,
                          prepared_statements=prepared(bouncer.pool_mode))
    yield store
    store.close()


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "tokens.json"
    return str(path), TokenFile(str(path)).add("pgbouncer")


def serve(tmp_path, url, token_file, *args, env=None, wait=True):
    """``plant-store serve`` on ``url`` with the pool and deadline of these tests."""
    return Server(tmp_path / f"serve{next(_names)}", "--store", "postgresql", "--database-url",
                  url, "--token-file", token_file, "--database-pool-size", str(POOL),
                  "--database-timeout", f"{DEADLINE:g}", *args, env=env, wait=wait)


def mode_args(mode):
    return () if prepared(mode) else ("--database-prepared-statements", "false")


def plant_ids(pg, dbname):
    with pg.connect(dbname) as conn:
        return {row[0] for row in conn.execute("SELECT id FROM plant_store_plants")}


class ReadyWatch:
    """GET /ready every 0.1 s in a thread: the worst latency, and how many were not 200."""

    def __init__(self, server):
        self.server, self.worst, self.not_ready, self.why = server, 0.0, 0, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.1):
            started = time.monotonic()
            try:
                status, _, body = self.server.request("GET", "/ready", timeout=10)
            except OSError as exc:
                status, body = None, repr(exc)
            if status != 200:
                self.why.add(body["message"] if isinstance(body, dict) else str(body))
            self.worst = max(self.worst, time.monotonic() - started)
            self.not_ready += status != 200

    def stop(self):
        self._stop.set()
        self._thread.join(15)
        return self


# Scenarios: each returns what it saw; the tests assert, the "before" figures print it.

def create_behind_a_lock(server, pg, dbname, token, hold=DEADLINE + 4):
    """A create while another session (on PostgreSQL directly) holds an ACCESS EXCLUSIVE
    lock on the plants table for up to ``hold`` seconds (released as soon as the create is
    answered): (status, body, seconds until the answer, whether the plant exists)."""
    answer = {}

    def create():
        started = time.monotonic()
        try:
            status, _, body = server.request("POST", "/plants", {"id": 4242, "name": "locked"},
                                             token, timeout=hold + 10)
        except OSError as exc:
            status, body = None, repr(exc)
        answer.update(status=status, body=body, seconds=time.monotonic() - started)

    with pg.connect(dbname) as locker:
        locker.execute("LOCK TABLE plant_store_plants IN ACCESS EXCLUSIVE MODE")
        thread = threading.Thread(target=create)
        thread.start()
        thread.join(hold)
        locker.rollback()
    thread.join(30)
    assert not thread.is_alive(), "the create never got an answer"
    return answer["status"], answer["body"], answer["seconds"], 4242 in plant_ids(pg, dbname)


def mixed_load(server, token, seconds=5.0, threads=16, timeout=10.0):
    """``threads`` clients for ``seconds``: creates of fresh ids, pages, deletes of their
    own plants. Returns what they saw: ``statuses`` per operation (``None``: no answer
    within ``timeout``), ``kept`` (ids acknowledged created and not deleted), ``deleted``
    (acknowledged deleted), ``not_created`` (creates answered 503 "not created"),
    ``messages`` (other 503s' messages) and ``slowest`` (the longest answer, seconds)."""
    stop = time.monotonic() + seconds
    seen = types.SimpleNamespace(statuses={"create": {}, "list": {}, "delete": {}},
                                 kept=set(), deleted=set(), not_created=set(), messages=[],
                                 slowest=0.0)
    lock = threading.Lock()

    def request(op, method, path, body=None):
        started = time.monotonic()
        try:
            status, _, answer = server.request(method, path, body, token, timeout=timeout)
        except OSError:
            status, answer = None, None
        with lock:
            seen.statuses[op][status] = seen.statuses[op].get(status, 0) + 1
            seen.slowest = max(seen.slowest, time.monotonic() - started)
            if status == 503:
                seen.messages.append(answer["message"])
        return status, answer

    def client(n):
        rng = random.Random(n)
        mine, ids = [], itertools.count(n * 1_000_000)
        while time.monotonic() < stop:
            roll = rng.random()
            if roll < 0.5 or not mine:
                plant_id = next(ids)
                status, answer = request("create", "POST", "/plants",
                                         {"id": plant_id, "name": f"p{plant_id}"})
                if status == 200:
                    mine.append(plant_id)
                elif status == 503 and "not created" in answer["message"]:
                    with lock:
                        seen.not_created.add(plant_id)
            elif roll < 0.8:
                request("list", "GET", "/plants?limit=20")
            else:
                plant_id = mine.pop(rng.randrange(len(mine)))
                status, answer = request("delete", "DELETE", f"/plants/{plant_id}")
                if status == 204:
                    with lock:
                        seen.deleted.add(plant_id)
                elif status == 503 and "kept" in answer["message"]:
                    mine.append(plant_id)  # else its outcome is unknown: counted neither way
        with lock:
            seen.kept.update(mine)

    workers = [threading.Thread(target=client, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(seconds + timeout + 10)
    assert not any(w.is_alive() for w in workers), "a client never got an answer"
    return seen


# The tests.

def test_the_service_starts_through_pgbouncer_with_its_defaults(tmp_path, bouncer, dbname,
                                                                  token_file):
    path, token = token_file
    with serve(tmp_path, bouncer.url(dbname), path, *mode_args(bouncer.pool_mode)) as server:
        assert server.request("GET", "/ready")[0] == 200
        assert server.request("POST", "/plants", {"id": 1, "name": "a"}, token)[0] == 200
        assert server.request("GET", "/plants", token=token)[2] == [{"name": "a"}]
    pools = {row["database"]: row for row in bouncer.admin("SHOW POOLS")}
    assert pools[dbname]["pool_mode"] == bouncer.pool_mode  # it went through pgbouncer
    assert "unsupported startup parameter" not in bouncer.log_text()


def test_a_start_that_fails_names_pgbouncers_reason(tmp_path, bouncer, token_file):
    """A database pgbouncer cannot reach: the service refuses to start, saying why."""
    path, _ = token_file
    server = serve(tmp_path, bouncer.url("no_such_database"), path,
                   *mode_args(bouncer.pool_mode), wait=False)
    try:
        assert server.proc.wait(30) != 0
    finally:
        server.stop()
    stderr = "".join(server.stderr)
    assert 'database "no_such_database" does not exist' in stderr, stderr
    assert "no connection within" not in stderr


def test_webhooks_are_delivered_through_pgbouncer(tmp_path, bouncer, dbname, token_file, pg):
    path, token = token_file
    with Receiver() as receiver, serve(
            tmp_path, bouncer.url(dbname), path, *mode_args(bouncer.pool_mode),
            "--webhook-urls", receiver.url, "--webhook-secret", SECRET) as server:
        for i in range(20):
            assert server.request("POST", "/plants", {"id": i, "name": f"p{i}"}, token)[0] == 200
        receiver.wait_for(20)
        time.sleep(0.5)  # time for a delivery sent twice to show
        got = sorted(json.loads(body)["id"] for _, body in receiver.delivered())
        assert got == list(range(20))
        assert all(verified(headers, body) for headers, body in receiver.delivered())
    with pg.connect(dbname) as conn:  # every delivery settled, none a dead letter
        assert conn.execute("SELECT count(*) FROM plant_store_outbox").fetchone()[0] == 0
    stderr = "".join(server.stderr)
    assert not re.search(r"ERROR|Traceback|paused|failed", stderr), stderr


def test_a_create_behind_a_table_lock_is_503_within_the_deadline(tmp_path, bouncer, dbname,
                                                                  token_file, pg):
    path, token = token_file
    with serve(tmp_path, bouncer.url(dbname), path, *mode_args(bouncer.pool_mode)) as server:
        assert server.request("POST", "/plants", {"id": 1, "name": "first"}, token)[0] == 200
        status, body, seconds, stored = create_behind_a_lock(server, pg, dbname, token)
        assert status == 503, (status, body, seconds)
        assert seconds <= DEADLINE + 1, seconds
        assert body["error"] == 503
        if "not created" in body["message"]:
            assert not stored  # a 503 that says not created is true
        else:
            assert "may have been created" in body["message"], body
        # The service is itself again at once: the cancelled create left nothing behind.
        assert server.request("POST", "/plants", {"id": 2, "name": "after"}, token)[0] == 200
        assert server.request("GET", "/ready")[0] == 200
    assert "Traceback" not in "".join(server.stderr)


def statement_timeout_scenario(server, pg, dbname, token, bouncer):
    """A create behind a table lock, run on server connections pgbouncer made afresh
    (RECONNECT: as after its server_lifetime, or PostgreSQL restarted behind it): (status,
    body, seconds, stored, whether PostgreSQL itself cancelled it)."""
    assert server.request("POST", "/plants", {"id": 1, "name": "first"}, token)[0] == 200
    bouncer.admin(f'RECONNECT "{dbname}"')
    log_start = len(pg.log_tail(10**6))
    status, body, seconds, stored = create_behind_a_lock(server, pg, dbname, token)
    cancelled = "canceling statement due to statement timeout" in pg.log_tail(10**6)[log_start:]
    return status, body, seconds, stored, cancelled


def test_statement_timeout_is_enforced_by_postgresql_through_pgbouncer(
        tmp_path, bouncer, dbname, token_file, pg):
    """The server's own bound, below the deadline, cancels a create behind a lock. In
    session mode the store's set_config takes; in transaction mode it is set for the
    database (the docs say: for the role), as a session setting does not follow the
    client from one server connection to the next."""
    path, token = token_file
    if bouncer.pool_mode == "transaction":
        bound_statements(pg, dbname, "1s")
    with serve(tmp_path, bouncer.url(dbname), path, *mode_args(bouncer.pool_mode),
               "--statement-timeout", "1") as server:
        status, body, seconds, stored, cancelled = statement_timeout_scenario(
            server, pg, dbname, token, bouncer)
    assert (status, stored) == (503, False), (status, body, seconds)
    assert cancelled  # by PostgreSQL's statement_timeout (1 s), below the deadline
    # A write cancelled while it waited may have waited on another writer of the same row:
    # the store tries again until the deadline, then says the outcome is unknown.
    assert "may have been created" in body["message"], body
    assert seconds <= DEADLINE + 1, seconds


@pytest.mark.parametrize("bouncer", ["transaction"], indirect=True)
def test_transaction_mode_refuses_to_start_or_bounds_statements_without_a_role_setting(
        tmp_path, bouncer, dbname, token_file, pg):
    path, token = token_file
    bound_statements(pg, dbname, None)  # as pgbouncer's docs leave it, not as ours say
    server = serve(tmp_path, bouncer.url(dbname), path, *mode_args(bouncer.pool_mode),
                   "--statement-timeout", "1", wait=False)
    try:
        server.wait_ready()
        status, body, seconds, _, cancelled = statement_timeout_scenario(
            server, pg, dbname, token, bouncer)
    except AssertionError:  # it refused to start: say why
        stderr = "".join(server.stderr)
        assert "statement_timeout" in stderr, stderr
        return
    finally:
        server.stop()
    assert cancelled, (status, body, seconds)


def test_a_wait_in_pgbouncers_queue_is_bounded_by_the_deadline(tmp_path, bouncer, dbname,
                                                                token_file, pg):
    """More service connections than pgbouncer has server connections for
    (database_pool_size 8): in session mode those beyond pgbouncer's 5 wait in its queue
    until a client leaves or its query_wait_timeout (120 s); in transaction mode each
    transaction queues for one of 4. Every request still answers within the deadline, as
    a 200 or a true 503, /ready within its second, and no acknowledged create is lost."""
    path, token = token_file
    with serve(tmp_path, bouncer.url(dbname), path, *mode_args(bouncer.pool_mode),
               "--database-pool-size", str(2 * POOL)) as server:
        ready = ReadyWatch(server)
        seen = mixed_load(server, token, seconds=4)
        ready.stop()
    stored = plant_ids(pg, dbname)
    assert {status for counts in seen.statuses.values() for status in counts} <= {
        200, 204, 503}, seen.statuses
    assert seen.slowest < DEADLINE + 1.5, seen.slowest
    assert seen.kept <= stored and not seen.deleted & stored and not seen.not_created & stored
    assert seen.statuses["create"].get(200, 0) > 50, seen.statuses
    # In session mode /ready's prober may be the connection left in pgbouncer's queue: then
    # it says "not ready" after its 0.9 s wait (plus the HTTP round trip on a busy machine).
    assert ready.worst < 1.2, (ready.worst, ready.why)


def test_mixed_load_has_no_500s_and_no_prepared_statement_errors(tmp_path, bouncer, dbname,
                                                                 token_file, pg):
    path, token = token_file
    log_start = len(pg.log_tail(10**6))
    with serve(tmp_path, bouncer.url(dbname), path, *mode_args(bouncer.pool_mode)) as server:
        ready = ReadyWatch(server)
        seen = mixed_load(server, token)
        ready.stop()
        # Idle again: ready (in session mode only if pgbouncer has a server connection for
        # /ready's prober besides the pool's: BOUNCER_POOL).
        assert server.request("GET", "/ready")[0] == 200, server.request("GET", "/ready")
    stored = plant_ids(pg, dbname)
    statuses = seen.statuses
    answered = {status for counts in statuses.values() for status in counts}
    assert answered <= {200, 204, 404, 503}, statuses
    assert sum(statuses["create"].values()) > 100, statuses  # the load was real
    assert seen.kept <= stored, f"acknowledged creates lost: {sorted(seen.kept - stored)[:9]}"
    assert not seen.deleted & stored, "acknowledged deletes undone"
    assert not seen.not_created & stored, "503 'not created' for creates that were stored"
    assert not any(counts.get(code) for counts in statuses.values() for code in (404, 503)), (
        statuses, seen.messages[:5])  # a healthy database behind pgbouncer: every answer
    # /ready answers within its second. It may say "not ready": 16 clients share 4
    # connections (requests wait for the pool), and in transaction mode its probe waits
    # for one of pgbouncer's 4 server connections like any transaction.
    assert ready.worst < 1.0, (ready.worst, ready.why)
    logs = pg.log_tail(10**6)[log_start:] + "".join(server.stderr) + bouncer.log_text()
    assert not PREPARED_ERRORS.search(logs), PREPARED_ERRORS.search(logs)
    assert "Traceback" not in "".join(server.stderr)


def test_the_contract_store_is_a_client_of_pgbouncer(bouncer, store, dbname):
    store.create(Plant(1, "x"))
    clients = [row for row in bouncer.admin("SHOW CLIENTS") if row["database"] == dbname]
    assert clients  # the pool's connections, and the prober's once /ready asked


def test_nothing_is_prepared_on_the_server_in_transaction_mode(bouncer, store):
    for i in range(50):  # well past psycopg's prepare threshold (5 runs of a query)
        store.create(Plant(i, "x"))
        store.get(i)
    counts = set()
    for _ in range(2 * POOL):  # whichever server connections pgbouncer hands out
        with store._pool.connection() as conn:
            counts.add(conn.execute("SELECT count(*) FROM pg_prepared_statements "
                                    "WHERE name LIKE '_pg3_%'").fetchone()[0])
    if prepared(bouncer.pool_mode):
        assert max(counts) > 0  # session mode: psycopg prepares, as on PostgreSQL itself
    else:
        assert counts == {0}
