"""The test suite's own PostgreSQL server (tests/support/pgserver.py) works as the other tests
need."""

import os
import stat
import time

import psycopg
import pytest

from support.pgserver import alive


def test_server_answers_on_its_unix_socket_only(postgres):
    with postgres.connect() as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        settings = dict(conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('listen_addresses', 'fsync', 'synchronous_commit')").fetchall())
    assert settings == {"listen_addresses": "", "fsync": "on", "synchronous_commit": "on"}
    assert stat.S_ISSOCK(os.stat(os.path.join(postgres.base, ".s.PGSQL.5432")).st_mode)
    assert postgres.url("x").startswith("postgresql://postgres@/x?host=/tmp/")


def test_database_url_is_a_fresh_empty_database(database_url):
    with psycopg.connect(database_url, connect_timeout=10) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables "
                              "WHERE schemaname NOT IN ('pg_catalog', 'information_schema')")
        assert tables.fetchone() == (0,)
        conn.execute("CREATE TABLE t (x int)")  # dropped with the database after the test


def test_kill_then_start_brings_it_back_with_committed_data(postgres, database_url):
    with psycopg.connect(database_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (42)")
    pid = postgres.pid
    assert pid
    session = psycopg.connect(database_url, connect_timeout=10)
    backend = session.execute("SELECT pg_backend_pid()").fetchone()[0]
    began = time.monotonic()
    postgres.kill()
    assert postgres.pid is None
    for gone in (pid, backend):  # the whole server, at once, as in a crash
        assert not alive(gone)
    with pytest.raises(psycopg.OperationalError):
        session.execute("SELECT 1")
    session.close()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(database_url, connect_timeout=2)
    postgres.start()  # crash recovery replays the WAL
    assert time.monotonic() - began < 10
    assert postgres.pid not in (None, pid)
    with psycopg.connect(database_url, connect_timeout=10) as conn:
        assert conn.execute("SELECT x FROM t").fetchall() == [(42,)]
