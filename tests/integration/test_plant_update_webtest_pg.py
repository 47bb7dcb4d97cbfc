"""tests/unit/http/test_plant_update.py, every row, through WebTest on the PostgreSQL store
(the unit tests run it on the memory and JSON-file stores; they may start no database)."""

import io
import pathlib
import sys

import pytest
import webtest

sys.path.insert(0, str(pathlib.Path(__file__).parent.parent / "unit" / "http"))
from test_plant_update import *  # noqa: F403  (the tests, run again here)

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.stores.postgres import PostgresStore

pytestmark = pytest.mark.slow  # real servers and PostgreSQL: .ci/run runs them after the suite


@pytest.fixture
def app(database_url, tokens, token):
    store = PostgresStore(database_url, timeout=5)
    config = Config(store="postgresql", database_url=database_url, page_size=2,
                    max_body_size=1024)
    test_app = webtest.TestApp(
        create_app(config, store=store, tokens=tokens, log_stream=io.StringIO()),
        extra_environ={"HTTP_AUTHORIZATION": f"Bearer {token}"})
    test_app.store = store
    yield test_app
    store.close()
