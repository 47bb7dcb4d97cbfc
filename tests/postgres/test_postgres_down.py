"""A database that cannot be reached is told in one line of the service's own, naming where
it was looked for; psycopg_pool's multi-line warnings are not printed."""

import re
import time

import pytest

from plant_store.stores.postgres.connection import describe
from support.pgserver import a_postgres_server
from support.servers import Server


@pytest.mark.parametrize(("url", "where"), [
    ("postgresql:///plants?host=/var/run/postgresql", "the Unix socket in /var/run/postgresql"),
    ("host=/tmp/pg dbname=plants", "the Unix socket in /tmp/pg"),
    ("postgresql://u:secret@db.example:6432/plants", "db.example:6432"),
    ("postgresql://u@db.example/plants", "db.example:5432"),
    ("postgresql://u@[::1]:7000/plants", "[::1]:7000"),
    ("host=a.example,b.example port=5433,5434 dbname=plants", "a.example:5433 or b.example:5434"),
    ("host=a.example,/run/pg port=5433 dbname=plants",
     "a.example:5433 or the Unix socket in /run/pg"),
])
def test_describe_names_the_socket_directory_or_host_and_port(url, where, monkeypatch):
    monkeypatch.delenv("PGHOST", raising=False)
    monkeypatch.delenv("PGPORT", raising=False)
    assert describe(url) == f"database 'plants' on {where}"


def test_describe_without_a_host_names_libpq_s_socket_directory(monkeypatch):
    monkeypatch.delenv("PGHOST", raising=False)
    said = describe("postgresql:///plants")
    assert said in ("database 'plants' on the Unix socket in /var/run/postgresql",
                    "database 'plants' on the Unix socket in /tmp")  # Debian's libpq, or not
    monkeypatch.setenv("PGHOST", "/srv/pg")
    assert describe("postgresql:///plants") == "database 'plants' on the Unix socket in /srv/pg"
    monkeypatch.setenv("PGPORT", "6000")
    assert describe("postgresql:///plants?host=h") == "database 'plants' on h:6000"


@pytest.fixture
def own_postgres():
    """A server of this test's own, to stop under a running service."""
    yield from a_postgres_server()


@pytest.mark.slow
def test_a_database_gone_under_a_running_server_is_one_throttled_line(tmp_path, own_postgres):
    url = own_postgres.create_database("plants")
    with Server(tmp_path / "data", "--store", "postgresql", "--database-url", url,
                "--database-timeout", "1") as server:
        token = server.first_token
        assert server.request("GET", "/plants", token=token)[0] == 200
        own_postgres.stop()
        for _ in range(3):
            assert server.request("GET", "/plants", token=token)[0] == 503
            time.sleep(0.5)
    log = "".join(server.stderr)
    assert "psycopg" not in log and "\tIs the server running" not in log, log
    said = [line for line in server.stderr if "ERROR" in line]
    assert len(said) == 1, log  # the pool tries every second or faster: one line, throttled
    assert re.search(r"ERROR \[plant_store\.stores\.postgres\.store\] database 'plants' on "
                     r"the Unix socket in /tmp/\S+ is not reachable: connection is bad: "
                     r"connection to server on socket .*: No such file or directory$",
                     said[0]), said
