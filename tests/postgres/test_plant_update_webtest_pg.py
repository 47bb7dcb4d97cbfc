"""tests/support/suites/plant_update.py, every row, through WebTest on the PostgreSQL store
(tests/unit/http/test_plant_update.py runs it on the memory and JSON-file stores; tests/unit
may start no database)."""

import io

import pytest
import webtest

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.stores.postgres import PostgresStore
from support.suites.plant_update import *  # noqa: F403 (every test_ of the suite)

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
