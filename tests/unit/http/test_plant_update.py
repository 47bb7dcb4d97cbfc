"""GET and PUT /plants/{id}, DELETE's If-Match and GET /plants?tag=, row by row
(tests/support/suites/plant_update.py), in process on the memory and JSON-file stores (on
PostgreSQL: tests/postgres/test_plant_update_webtest_pg.py; over real HTTP:
tests/integration/test_plant_update_http.py)."""

import io

import pytest
import webtest

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.stores import JsonFileStore, MemoryStore
from support.suites.plant_update import *  # noqa: F403 (every test_ of the suite)


@pytest.fixture(params=["memory", "jsonfile"])
def app(request, tmp_path, tokens, token):
    store = MemoryStore() if request.param == "memory" else JsonFileStore(str(tmp_path / "d"))
    config = Config(store=request.param, data_dir=str(tmp_path / "data"), page_size=2,
                    max_body_size=1024)
    test_app = webtest.TestApp(
        create_app(config, store=store, tokens=tokens, log_stream=io.StringIO()),
        extra_environ={"HTTP_AUTHORIZATION": f"Bearer {token}"})
    test_app.store = store
    yield test_app
    store.close()
