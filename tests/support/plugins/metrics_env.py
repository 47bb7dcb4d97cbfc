"""No test leaves a metrics directory named in os.environ."""

import os

import pytest


@pytest.fixture(autouse=True)
def _no_metrics_directory_leaks():
    """Importing plant_store.gunicorn_hooks names a metrics directory in os.environ; left
    there, every later 'plant-store serve' a test starts refuses it."""
    before = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    yield
    assert os.environ.get("PROMETHEUS_MULTIPROC_DIR") == before, (
        "the test left PROMETHEUS_MULTIPROC_DIR in os.environ")

