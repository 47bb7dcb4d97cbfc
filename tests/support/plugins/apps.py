"""``config`` and ``app``: the service in process, under WebTest."""

import io

import pytest
import webtest

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.metrics import for_config
from plant_store.stores import MemoryStore


@pytest.fixture
def config(tmp_path):
    return Config(store="memory", data_dir=str(tmp_path / "data"))


@pytest.fixture
def app(config, tokens, token):
    """The WSGI app under WebTest, with the token sent on every request."""
    store = MemoryStore()
    test_app = webtest.TestApp(
        create_app(config, store=store, tokens=tokens, log_stream=io.StringIO(),
                   metrics=for_config(config, store)),
        extra_environ={"HTTP_AUTHORIZATION": f"Bearer {token}"},
    )
    test_app.store = store
    return test_app

