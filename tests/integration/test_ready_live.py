"""The real-server half of tests/unit/http/test_ready.py: readiness: ``/ready`` answers 200 only
while the store can take writes, and 503 in the Error shape naming why; ``/health`` (liveness)
stays 200 all the while. Over real HTTP where the fault is real: a data file replaced under the
server, a PostgreSQL server stopped and started, a database made read-only."""

import os
import time

from support.servers import Server


def wait_for(server, status, says="", timeout=15):
    """/ready's answer once it is ``status`` with ``says`` in its message, or the last."""
    deadline = time.monotonic() + timeout
    while True:
        answer = server.request("GET", "/ready", timeout=10)
        if (answer[0] == status and says in str(answer[2])) or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def test_a_data_file_replaced_under_the_server_is_not_ready(tmp_path):
    with Server(tmp_path) as server:
        assert server.request("GET", "/ready")[0] == 200
        (tmp_path / "other").write_bytes(b"")
        os.replace(tmp_path / "other", tmp_path / "plants.jsonl")
        status, _, body = server.request("GET", "/ready")
        assert status == 503 and body["error"] == 503
        assert body["message"].startswith("The store cannot take writes now: ")
        assert "plants.jsonl was replaced under the running server" in body["message"]
        assert server.request("GET", "/health")[0] == 200


def test_postgresql_stopped_is_not_ready_and_started_again_is(tmp_path, postgres, database_url):
    with Server(tmp_path, "--store", "postgresql", "--database-url", database_url,
                "--database-timeout", "1") as server:
        assert server.request("GET", "/ready")[0] == 200
        postgres.stop()
        try:
            status, _, body = server.request("GET", "/ready", timeout=10)
            assert status == 503 and body["error"] == 503
            assert "not reachable" in body["message"]
            assert server.request("GET", "/health")[0] == 200
        finally:
            postgres.start()
        assert wait_for(server, 200)[0] == 200


def test_a_read_only_postgresql_is_not_ready(tmp_path, postgres, database_url):
    import psycopg

    with Server(tmp_path, "--store", "postgresql", "--database-url", database_url) as server:
        assert server.request("GET", "/ready")[0] == 200
        dbname = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
        with psycopg.connect(postgres.url("postgres"), autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{dbname}" SET default_transaction_read_only = on')
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s", [dbname])  # the pool reconnects read-only
        status, _, body = wait_for(server, 503, "read-only")  # the first may meet a
        assert status == 503 and "read-only" in body["message"]  # terminated connection
