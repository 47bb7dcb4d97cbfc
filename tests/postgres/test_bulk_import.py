"""The bulk import (issue 37) against real processes and a real PostgreSQL: an import killed
with SIGKILL in the middle of its batches is completed by running it again, every plant
once and in the file's order; and the PostgreSQL store's ``create_many`` (transactions of
1,024 plants, COPY into a temporary table) keeps order, replays, conflicts and the clock's
moves as a create each would.

The figures (plants a second, before and after) are bench/transfer_bench.py's, not a test's.
"""

import os
import signal
import subprocess
import sys
import time

import orjson
import psycopg
import pytest

from plant_store.config import Config
from plant_store.stores import BatchConflict, open_store
from plant_store.stores.postgres import PostgresStore
from plant_store.stores.records import Plant

KILLED = 200_000  # plants of the killed import: 20 batches of transfer.BATCH


def settings(kind: str, tmp_path, request) -> dict:
    if kind == "jsonfile":
        return {"store": "jsonfile", "data_dir": str(tmp_path / "data")}
    return {"store": "postgresql", "data_dir": str(tmp_path / "data"),
            "database_url": request.getfixturevalue("database_url")}


def flags(config: dict) -> list[str]:
    return [arg for name, value in config.items()
            for arg in ("--" + name.replace("_", "-"), str(value))]


def stored(config: dict) -> int:
    """Plants stored so far, read from outside the importing process."""
    if config["store"] == "jsonfile":
        try:
            with open(os.path.join(config["data_dir"], "plants.jsonl"), "rb") as fh:
                return fh.read().count(b"\n")
        except FileNotFoundError:
            return 0
    try:
        with psycopg.connect(config["database_url"]) as conn:
            return conn.execute("SELECT count(*) FROM plant_store_plants").fetchone()[0]
    except psycopg.errors.UndefinedTable:  # the import has not made the schema yet
        return 0


def listed(config: dict) -> list[Plant]:
    with open_store(Config(**config), lock_timeout=0) as store:
        plants, start = [], 0
        while start is not None:
            page, start = store.page(start, 10_000)
            plants += page
    return plants


def jsonl(plants) -> bytes:
    return b"".join(orjson.dumps({"id": p.id, "name": p.name} | ({} if p.tag is None else
                                                                  {"tag": p.tag}),
                                 option=orjson.OPT_APPEND_NEWLINE) for p in plants)


def importing(config: dict, source) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "plant_store", "import", *flags(config), "--input", str(source)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, "PLANT_STORE_LOG_LEVEL": "warning"})


@pytest.mark.slow  # 3 to 15 s each
@pytest.mark.parametrize("kind", ["jsonfile", "postgresql"])
def test_an_import_killed_mid_batch_is_completed_by_a_rerun(tmp_path, request, kind):
    config = settings(kind, tmp_path, request)
    plants = [Plant((n * 2654435761) % 2**63 - 2**62, f"plant {n}", "t" if n % 3 else None)
              for n in range(KILLED)]
    source = tmp_path / "plants.jsonl"
    source.write_bytes(jsonl(plants))

    first = importing(config, source)
    deadline = time.monotonic() + 60
    while stored(config) < KILLED // 10:  # a few batches in: the next is under way
        assert first.poll() is None, first.stderr.read()
        assert time.monotonic() < deadline, "the import made no progress"
        time.sleep(0.005)
    first.send_signal(signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL
    first.stderr.close()
    at_kill = stored(config)
    assert at_kill < KILLED, "the import ended before the kill"
    done = listed(config)
    assert done == plants[: len(done)]  # a prefix of the file, in its order

    rerun = importing(config, source)
    _, stderr = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, stderr
    # (A warning may come first, had the kill torn the JSON file's last line.)
    assert stderr.decode().splitlines()[-1] == (
        f"imported {KILLED - len(done)}, already there {len(done)}")
    assert listed(config) == plants  # every plant once, in the file's order


@pytest.fixture
def pg(database_url):
    with PostgresStore(database_url) as store:
        yield store


def positions(database_url) -> list[int]:
    with psycopg.connect(database_url) as conn:
        return [row[0] for row in conn.execute(
            "SELECT id FROM plant_store_plants ORDER BY position")]


def test_postgresql_batches_of_many_transactions_keep_the_order(pg, database_url):
    plants = [Plant(n * 7919 % 5000 - 2500, f"plant {n}", "t" if n % 2 else None)
              for n in range(5000)]
    assert pg.create_many(plants[:100]) == [(p, True) for p in plants[:100]]
    # stored ones replay, the rest are created; 1,024 plants a transaction
    assert pg.create_many(plants) == [(p, n >= 100) for n, p in enumerate(plants)]
    assert positions(database_url) == [p.id for p in plants]
    assert [p for p in pg.page(0, 6000)[0]] == plants
    assert pg.outbox_counts() == (0, 0)  # an imported plant owes no webhook delivery
    assert pg.create_many([]) == []


def test_postgresql_batch_with_repeated_ids(pg):
    batch = [Plant(n, f"plant {n}") for n in range(1, 1501)]
    batch[700:700] = [Plant(3, "plant 3")]  # the same again, in the first transaction
    batch[1300:1300] = [Plant(1200, "plant 1200")]  # and in the second
    done = pg.create_many(batch)
    assert [created for _, created in done] == [n not in (700, 1300)
                                                for n in range(len(batch))]
    assert pg.page(0, 2000)[0] == [p for n, p in enumerate(batch) if n not in (700, 1300)]
    with pytest.raises(BatchConflict) as raised:
        pg.create_many([Plant(5000, "new"), Plant(5000, "other")])
    assert (raised.value.stored, raised.value.done) == (Plant(5000, "new"),
                                                        [(Plant(5000, "new"), True)])


@pytest.mark.parametrize("at", [0, 1, 1023, 1024, 2500])
def test_postgresql_batch_stops_at_a_conflict(pg, database_url, at):
    plants = [Plant(n, f"plant {n}") for n in range(3000)]
    other = Plant(at, "Other", "tag")
    pg.create(other)
    with pytest.raises(BatchConflict) as raised:
        pg.create_many(plants)
    assert raised.value.stored == other
    assert raised.value.done == [(p, True) for p in plants[:at]]
    assert pg.page(0, 4000)[0] == [other, *plants[:at]]


def test_postgresql_batch_after_the_data_moved(pg, database_url):
    """A stale clock (the data on another timeline) is rebased, and the import goes on
    above every position stored."""
    pg.create_many([Plant(n, "before") for n in range(2000)])
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE plant_store_batch_clock SET timeline = timeline + 1")
    after = [Plant(n, "after") for n in range(-1, -2001, -1)]
    assert pg.create_many(after) == [(p, True) for p in after]
    assert pg.page(0, 5000)[0] == [Plant(n, "before") for n in range(2000)] + after


def test_postgresql_batch_survives_its_connections_dying(pg, database_url):
    """Every connection of the pool killed between two batches: each transaction is tried
    again on a new one."""
    pg.create_many([Plant(n, "first") for n in range(1000)])
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    second = [Plant(n, "second") for n in range(1000, 4000)]
    assert pg.create_many(second) == [(p, True) for p in second]
    assert len(pg) == 4000


def test_postgresql_replays_lock_but_do_not_rewrite(pg, database_url):
    """A resumed import replays what it made before: each row is locked (the commit waits
    for what the lock wrote ahead) but kept, not rewritten as a conflict's would be."""
    plants = [Plant(n, f"plant {n}") for n in range(2000)]
    pg.create_many(plants)
    query = "SELECT xmin::text, xmax::text FROM plant_store_plants ORDER BY id"
    with psycopg.connect(database_url, autocommit=True) as conn:
        before = conn.execute(query).fetchall()
        assert pg.create_many(plants) == [(p, False) for p in plants]
        after = conn.execute(query).fetchall()
    assert [xmin for xmin, _ in after] == [xmin for xmin, _ in before]  # the same versions
    assert all(xmax != "0" for _, xmax in after)  # each locked by the replay


def test_postgresql_a_stored_id_amid_new_ones_takes_the_general_way(pg, database_url):
    """A transaction is copied straight into the table unless one of its ids is stored:
    then the copy fails, and the same transaction creates the rest around the replay."""
    pg.create(Plant(500, "plant 500"))
    plants = [Plant(n, f"plant {n}") for n in range(3000)]
    assert pg.create_many(plants) == [(p, p.id != 500) for p in plants]
    assert positions(database_url) == [500, *(n for n in range(3000) if n != 500)]
