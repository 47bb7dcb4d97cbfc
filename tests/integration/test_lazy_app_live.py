"""The real-server half of tests/unit/serving/test_lazy_app.py: ``plant_store.wsgi:application``
is a plain WSGI app configured from the environment, built in the process that serves it."""

import json
import logging
import os
import subprocess
import sys
import textwrap
import time

import pytest
import webtest

from plant_store import __version__
from plant_store.config import Config
from plant_store.serving import lazy_app
from plant_store.serving.lazy_app import UNAVAILABLE, LazyApp
from plant_store.tokens import TokenFile
from support.assertions import assert_error
from support.journals import records
from support.receiver import SECRET
from support.servers import StoreHolder
from support.wsgi import call


def test_wsgi_module_builds_the_app_from_the_environment(tmp_path):
    script = textwrap.dedent("""
        import webtest
        from plant_store.tokens import TokenFile
        token = TokenFile(%r).add("wsgi")
        from plant_store.wsgi import application
        app = webtest.TestApp(application)
        r = app.post_json("/plants", {"id": 1, "name": "x"},
                          headers={"Authorization": "Bearer " + token})
        print(r.status_int, r.json)
    """) % str(tmp_path / "tokens.json")
    env = {**os.environ, "PLANT_STORE_DATA_DIR": str(tmp_path), "PLANT_STORE_LOG_LEVEL": "error"}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=30)
    assert result.stdout.strip() == "200 {'name': 'x'}", result.stderr
    assert len(records(tmp_path)) == 1


def test_importing_reads_the_settings_but_opens_nothing(tmp_path):
    # A pre-fork server imports the module in its master: nothing may be opened or started
    # there (the workers would share it), but a bad setting must still fail right away.
    script = textwrap.dedent("""
        import threading
        import plant_store.wsgi
        from plant_store.stores import JsonFileStore
        JsonFileStore(%r).close()  # nobody holds the data directory
        print(sorted(thread.name for thread in threading.enumerate()))
    """) % str(tmp_path)
    env = {**os.environ, "PLANT_STORE_DATA_DIR": str(tmp_path),
           "PLANT_STORE_WEBHOOK_URLS": "http://127.0.0.1:9/",
           "PLANT_STORE_WEBHOOK_SECRET": SECRET}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=30)
    assert result.stdout.strip() == "['MainThread']", result.stderr
    result = subprocess.run([sys.executable, "-c", "import plant_store.wsgi"],
                            env={**env, "PLANT_STORE_PORT": "eighty"}, capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 1 and "ConfigError: setting port='eighty'" in result.stderr


@pytest.mark.slow
def test_a_process_that_cannot_open_the_store_answers_503_until_it_can(tmp_path, caplog):
    config = Config(data_dir=str(tmp_path), lock_timeout=0.5)
    token = TokenFile(config.token_file).add("t")
    owner = StoreHolder(tmp_path)
    app = webtest.TestApp(LazyApp(config),
                          extra_environ={"HTTP_AUTHORIZATION": f"Bearer {token}"})
    started = time.monotonic()
    message = assert_error(app.post_json("/plants", {"id": 1, "name": "x"}, status=503), 503)
    assert time.monotonic() - started >= 0.4  # the first try waits for the owner
    assert message == UNAVAILABLE  # no path, no PID: those are for the log
    started = time.monotonic()
    assert_error(app.get("/ready", status=503), 503)  # within the second: not tried
    time.sleep(lazy_app.RETRY_INTERVAL)
    assert_error(app.get("/ready", status=503), 503)  # tried again, at once
    assert time.monotonic() - started < lazy_app.RETRY_INTERVAL + 0.3
    owner.release()
    assert_error(app.get("/ready", status=503), 503)  # the next try is a second away
    time.sleep(lazy_app.RETRY_INTERVAL)
    assert app.post_json("/plants", {"id": 1, "name": "x"}).json == {"name": "x"}
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1  # one line, not one a try; it names the directory and owner
    assert f"{tmp_path} is in use by another plant-store process (PID {owner.pid})" in errors[0]


# Python 3.12+ warns about fork() in a process with threads; forking one is the point here.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_copy_of_a_built_app_builds_its_own(tmp_path):
    # The copy must not write through the parent's store; it opens its own, which the
    # parent holds, so it answers 503 naming the parent.
    app = LazyApp(Config(data_dir=str(tmp_path), lock_timeout=0))
    assert call(app) == (200, {"status": "ready", "version": __version__})
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            logged = []
            handler = logging.Handler()
            handler.emit = lambda record: logged.append(record.getMessage())
            logging.getLogger("plant_store.lazy_app").addHandler(handler)
            os.write(write, json.dumps([*call(app), logged]).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        status, body, logged = json.load(pipe)
    assert status == 503 and body["message"] == UNAVAILABLE
    assert len(logged) == 1 and f"(PID {os.getpid()})" in logged[0]
    assert call(app) == (200, {"status": "ready", "version": __version__})
