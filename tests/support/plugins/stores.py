"""``store``: each store in turn, the contracts' subject."""

import pytest

from plant_store.stores import JsonFileStore, MemoryStore
from support.paths import UNIT


def pytest_generate_tests(metafunc):
    """A test of ``store`` runs on each store: in tests/unit the two in process, elsewhere
    PostgreSQL too; a module's ``STORE_KINDS`` says otherwise."""
    named = {name for mark in metafunc.definition.iter_markers("parametrize")
             for name in ([mark.args[0]] if isinstance(mark.args[0], str) else mark.args[0])}
    if "store" in metafunc.fixturenames and not {"store", "store,"} & named:
        inside = UNIT in metafunc.definition.path.parents
        kinds = ("memory", "jsonfile") if inside else ("memory", "jsonfile", "postgresql")
        kinds = getattr(metafunc.module, "STORE_KINDS", kinds)  # () for a store of its own
        if kinds:
            metafunc.parametrize("store", kinds, indirect=True)


@pytest.fixture
def store(request, tmp_path):
    """Each store in turn: the contract holds whatever keeps the data."""
    if request.param == "memory":
        store = MemoryStore()
    elif request.param == "jsonfile":
        store = JsonFileStore(str(tmp_path / "data"))
    else:
        from plant_store.stores.postgres import PostgresStore

        store = PostgresStore(request.getfixturevalue("database_url"))
    yield store
    store.close()

