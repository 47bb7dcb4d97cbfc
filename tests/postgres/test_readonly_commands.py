"""Commands that only read never write (issue 46): on a database with no schema, or one
migration behind, ``plants get``, ``plants list``, ``export``, ``webhooks list`` and
``db check`` refuse in one line naming ``plant-store db migrate`` (db check: says what is
pending), and the schema is as it was."""

import psycopg
import pytest

from plant_store.stores.postgres import schema
from support.servers import run_cli

pytestmark = pytest.mark.slow  # a real PostgreSQL and a process per command

READERS = [("plants", "get", "1"), ("plants", "list"), ("export", "--output", "-"),
           ("webhooks", "list")]


def _state(url):
    with psycopg.connect(url) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE "
                              "'plant_store%'").fetchone()[0]
        return schema.applied(conn), tables


def _one_behind(url):
    """Every migration but the newest (0008), as the release before left the schema."""
    with psycopg.connect(url) as conn:
        schema.migrate(conn)
        conn.execute("ALTER TABLE plant_store_plants DROP COLUMN stamp")
        conn.execute("DROP FUNCTION plant_store_new_stamp()")
        conn.execute("DELETE FROM plant_store_schema WHERE version = 8")
        conn.commit()


@pytest.mark.parametrize("behind", ["empty", "one behind"])
def test_a_command_that_only_reads_refuses_missing_migrations_and_writes_nothing(
        database_url, tmp_path, behind):
    if behind == "one behind":
        _one_behind(database_url)
    before = _state(database_url)
    env = {"PLANT_STORE_STORE": "postgresql", "PLANT_STORE_DATABASE_URL": database_url,
           "PLANT_STORE_DATA_DIR": str(tmp_path)}
    for command in READERS:
        done = run_cli(*command, env=env)
        lines = done.stderr.strip().splitlines()
        assert done.returncode != 0 and len(lines) == 1, (command, done.stderr)
        assert "plant-store db migrate" in lines[0] and "0008_write_stamps.sql" in lines[0], (
            command, lines)
        assert done.stdout == ""
    check = run_cli("db", "check", "--database-url", database_url)
    assert check.returncode == 1 and "pending: " in check.stdout
    assert "0008_write_stamps.sql" in check.stdout
    assert _state(database_url) == before
