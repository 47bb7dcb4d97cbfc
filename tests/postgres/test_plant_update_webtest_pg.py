"""tests/support/suites/plant_update.py, every row, through WebTest on the PostgreSQL store
(tests/unit/http/test_plant_update.py runs it on the memory and JSON-file stores; tests/unit
may start no database)."""

import pytest

from plant_store.stores.postgres import PostgresStore
from support.suites.plant_update import *  # noqa: F403 (every test_ of the suite)
from support.suites.plant_update import served

pytestmark = pytest.mark.slow  # real servers and PostgreSQL: .ci/run runs them after the suite


@pytest.fixture
def app(database_url, tokens, token):
    store = PostgresStore(database_url, timeout=5)
    yield served(store, tokens, token, store="postgresql", database_url=database_url)
    store.close()
