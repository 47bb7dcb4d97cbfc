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




def test_an_unreadable_token_file_at_start_is_a_503_in_the_error_shape(tmp_path, caplog):
    """The hostile pass on issue 52's third round: a token file a worker could not read as
    it built the app made every request a 500 with a traceback (gunicorn's HTML page)."""
    (tmp_path / "tokens.json").write_text("{not json")
    app = LazyApp(Config(store="memory", data_dir=str(tmp_path),
                         token_file=str(tmp_path / "tokens.json")))
    assert call(app, "/ready") == (503, {"error": 503, "message": UNAVAILABLE})
    assert call(app, "/plants") == (503, {"error": 503, "message": UNAVAILABLE})
    assert call(app, "/health") == (200, {"status": "ok"})
    logged = [r.getMessage() for r in caplog.records if "answers 503" in r.getMessage()]
    assert len(logged) == 1 and "cannot read token file" in logged[0]
