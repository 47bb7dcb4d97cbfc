"""Versions across a restore of PostgreSQL (issue 49, finding 6): a ``pg_dump`` taken before
the last update, restored, put the revision back, so the next update issued an ETag a
client already held, and that client's stale conditional PUT went through. Each write is
stamped (migration 0008) with a random number no restore can bring back for a new write."""

import os
import subprocess

import pytest

from plant_store.stores import PreconditionFailed
from plant_store.stores.postgres import PostgresStore
from plant_store.stores.records import Plant, Preconditions

pytestmark = pytest.mark.slow  # real servers and PostgreSQL: .ci/run runs them after the suite


def if_match(*versions):
    return Preconditions(if_match=frozenset(versions))


def run(postgres, *args):
    result = subprocess.run([os.path.join(postgres.bindir, args[0]), *args[1:]],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("into", ["same database", "fresh database"])
def test_an_etag_issued_after_a_dump_never_matches_once_the_dump_is_restored(
        postgres, database_url, tmp_path, into):
    dump = str(tmp_path / "plants.dump")
    issued = []
    with PostgresStore(database_url, timeout=5) as store:
        store.create(Plant(1, "Fern"))
        store.create(Plant(2, "Aloe"))
        issued.append(store.fetch(1).version)
        issued.append(store.update(Plant(1, "Fern 2"))[0].version)
        at_dump = issued[-1]
        aloe = store.fetch(2)
        run(postgres, "pg_dump", "--format=custom", "--file", dump, database_url)
        issued.append(store.update(Plant(1, "Fern 3"))[0].version)  # a client holds it
    if into == "same database":
        run(postgres, "pg_restore", "--clean", "--if-exists", "--single-transaction",
            "--dbname", database_url, dump)
        url = database_url
    else:
        url = postgres.create_database(f"restored_{os.getpid()}")
        run(postgres, "pg_restore", "--single-transaction", "--dbname", url, dump)
    try:
        with PostgresStore(url, timeout=5) as store:
            # The plants as they were, each with the version it had then.
            assert store.fetch(1) == (Plant(1, "Fern 2"), at_dump)
            assert store.fetch(2) == aloe
            with pytest.raises(PreconditionFailed):  # issued after the dump: gone with it
                store.update(Plant(1, "Fern, stale"), if_match(issued[-1]))
            done, wrote = store.update(Plant(1, "Fern 4"), if_match(at_dump))
            assert wrote and done.version not in issued, "a version came back after a restore"
            issued.append(done.version)
            with pytest.raises(PreconditionFailed):  # the client holding "Fern 3"'s ETag
                store.update(Plant(1, "Fern, stale"), if_match(*issued[:-1]))
            with pytest.raises(PreconditionFailed):
                store.delete(1, if_match(*issued[:-1]))
            assert store.get(1) == Plant(1, "Fern 4")
    finally:
        if url != database_url:
            postgres.drop_database(url.rsplit("/", 1)[1])
