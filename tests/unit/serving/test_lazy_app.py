"""plant_store.serving.lazy_app: ``plant_store.wsgi:application`` is a plain WSGI app
configured from the environment, built (by LazyApp) in the process that serves it."""

import threading
import time

from plant_store.config import Config
from plant_store.serving.lazy_app import UNAVAILABLE, LazyApp
from plant_store.stores import JsonFileStore
from support.wsgi import call


def test_health_answers_at_once_while_the_store_cannot_be_opened(tmp_path):
    # Liveness: a store that is locked (or a database that is down) is no reason to restart.
    config = Config(data_dir=str(tmp_path), lock_timeout=5)
    with JsonFileStore(str(tmp_path)):
        app = LazyApp(config)
        started = time.monotonic()
        assert call(app, "/health") == (200, {"status": "ok"})
        assert time.monotonic() - started < 1  # not the lock_timeout of a build
        status, body = call(LazyApp(Config(store="postgresql", lock_timeout=0,
                                           database_url="postgresql://u@/db?host=/nonexistent",
                                           database_timeout=0.2)), "/plants")
    assert status == 503 and body["message"] == UNAVAILABLE  # not the database


def test_concurrent_first_requests_build_the_app_once(tmp_path):
    # A second build in the process would find the lock held by the first: a 503.
    app = LazyApp(Config(data_dir=str(tmp_path), lock_timeout=0))
    start = threading.Barrier(8)
    statuses = []

    def first_request():
        start.wait(10)
        statuses.append(call(app)[0])

    threads = [threading.Thread(target=first_request) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert statuses == [200] * 8


