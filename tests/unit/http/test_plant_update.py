"""GET and PUT /plants/{id}, DELETE's If-Match and GET /plants?tag=, row by row
(tests/support/suites/plant_update.py), in process on the memory and JSON-file stores (on
PostgreSQL: tests/postgres/test_plant_update_webtest_pg.py; over real HTTP:
tests/integration/test_plant_update_http.py)."""

import pytest

from plant_store.stores import JsonFileStore, MemoryStore
from support.suites.plant_update import *  # noqa: F403 (every test_ of the suite)
from support.suites.plant_update import served


@pytest.fixture(params=["memory", "jsonfile"])
def app(request, tmp_path, tokens, token):
    store = MemoryStore() if request.param == "memory" else JsonFileStore(str(tmp_path / "d"))
    yield served(store, tokens, token, store=request.param, data_dir=str(tmp_path / "data"))
    store.close()
