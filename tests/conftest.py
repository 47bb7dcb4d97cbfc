import collections
import importlib.util
import io
import itertools
import os
import pathlib
import re
import signal
import socket
import subprocess

import pytest
import webtest

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.metrics import for_config
from plant_store.stores import JsonFileStore, MemoryStore
from plant_store.tokens import TokenFile
from plant_store.util.words import counted
from support.browser import Browser, find_chromium
from support.needs import NO_CHROMIUM, NO_POSTGRES, needed
from support.pgserver import a_postgres_server
from support.proxies import certificates


def _ignore(signum, frame):
    """Ignores a signal, as SIG_IGN would, but is reset to the default in a child."""


def pytest_configure(config):
    """A runner started under nohup, or in a shell's background, ignores SIGHUP or SIGINT,
    and an ignored signal stays ignored across exec: the servers the tests stop with them
    would not stop. A handler that does nothing keeps ignoring them here, and is reset to
    the default in every process the tests start (a handler, unlike an ignore, does not
    outlive exec)."""
    for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        if signal.getsignal(signum) is signal.SIG_IGN:
            signal.signal(signum, _ignore)


@pytest.fixture
def tokens(tmp_path):
    """A token file checked on every request, so tests see changes at once."""
    return TokenFile(str(tmp_path / "tokens.json"), recheck=0)


@pytest.fixture
def token(tokens):
    return tokens.add("tests")


def pytest_generate_tests(metafunc):
    """A test of ``store`` runs on each store: in tests/unit the two in process, elsewhere
    PostgreSQL too; a module's ``STORE_KINDS`` says otherwise."""
    named = {name for mark in metafunc.definition.iter_markers("parametrize")
             for name in ([mark.args[0]] if isinstance(mark.args[0], str) else mark.args[0])}
    if "store" in metafunc.fixturenames and not {"store", "store,"} & named:
        inside = UNIT in metafunc.definition.path.parents
        kinds = ("memory", "jsonfile") if inside else ("memory", "jsonfile", "postgresql")
        kinds = getattr(metafunc.module, "STORE_KINDS", kinds)  # () for a store of its own
        if kinds:
            metafunc.parametrize("store", kinds, indirect=True)


@pytest.fixture
def store(request, tmp_path):
    """Each store in turn: the contract holds whatever keeps the data."""
    if request.param == "memory":
        store = MemoryStore()
    elif request.param == "jsonfile":
        store = JsonFileStore(str(tmp_path / "data"))
    else:
        from plant_store.stores.postgres import PostgresStore

        store = PostgresStore(request.getfixturevalue("database_url"))
    yield store
    store.close()


_database_names = itertools.count(1)


@pytest.fixture(scope="session")
def postgres():
    """One throwaway PostgreSQL server for the whole run (tests/support/pgserver.py). Without the
    server binaries the tests that need it skip, and the summary says how many; in CI
    (``CI=true``) they fail instead, since CI must run them."""
    yield from a_postgres_server()


@pytest.fixture
def database_url(postgres, request):
    """A fresh, empty database for this test, dropped afterwards."""
    slug = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())
    name = f"t{next(_database_names)}_{slug}"[:63]
    url = postgres.create_database(name)
    yield url
    postgres.drop_database(name)


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the whole run (tests/support/browser.py). Without Debian's chromium
    and chromium-driver the tests that need it skip, and the summary says how many; in CI
    (``CI=true``) they fail instead, since CI must run them."""
    found = needed(find_chromium(), NO_CHROMIUM, "chromium, chromium-driver", "browser")
    # It trusts the proxies' test certificate (tests/support/proxies.py), for pages over HTTPS.
    browser = Browser(*found, trusted_keys=(certificates().spki,))
    try:
        yield browser
    finally:
        browser.quit()


MISSING = [  # (the reason a test skips or fails with, what it is, how to install it)
    (NO_POSTGRES, "PostgreSQL", "apt-get install postgresql"),
    (NO_CHROMIUM, "browser", "apt-get install chromium chromium-driver"),
]


def skip_causes(skipped):
    """One closing line per cause of the ``skipped`` reports, most frequent first: a test
    that skips for want of nginx, Apache, Caddy, HAProxy, Chromium, PostgreSQL or a mount
    never skips silently (issue 46)."""
    causes = collections.Counter(
        str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
        .removeprefix("Skipped: ") for report in skipped)
    return [f"{counted(count, 'test')} skipped: {cause}" for cause, count in causes.most_common()]


def pytest_terminal_summary(terminalreporter):
    skipped = terminalreporter.stats.get("skipped", [])
    if skipped:
        terminalreporter.section("skipped, by cause", sep="-", yellow=True)
        for line in skip_causes(skipped):
            terminalreporter.write_line(line, yellow=True)
    for reason, what, install in MISSING:
        skips = sum(reason in str(report.longrepr) for report in skipped)
        errors = sum(reason in str(report.longrepr)
                     for report in terminalreporter.stats.get("error", []))
        if skips or errors:
            count = (f"{counted(skips, what + ' test')} skipped" if skips
                     else f"{counted(errors, what + ' test')} failed")
            terminalreporter.section(what, sep="!", red=True, bold=True)
            terminalreporter.write_line(f"{reason}: {count}; .ci/run installs it ({install})",
                                        red=True, bold=True)


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


@pytest.fixture(autouse=True)
def _no_metrics_directory_leaks():
    """Importing plant_store.gunicorn_hooks names a metrics directory in os.environ; left
    there, every later 'plant-store serve' a test starts refuses it."""
    before = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    yield
    assert os.environ.get("PROMETHEUS_MULTIPROC_DIR") == before, (
        "the test left PROMETHEUS_MULTIPROC_DIR in os.environ")


UNIT = pathlib.Path(__file__).parent / "unit"
REAL_THINGS = {"postgres", "database_url", "browser"}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """tests/unit runs in process, the loop run after every edit: a test there that starts
    a process, forks, listens on a socket or asks for a database or browser fails (in its
    fixtures too, whatever their scope), and belongs in tests/integration."""
    if UNIT not in item.path.parents and not os.environ.get("PLANT_STORE_UNIT_GUARD"):
        yield
        return
    patched = [(subprocess.Popen, "__init__"), (os, "fork"), (socket.socket, "listen")]
    saved = [getattr(owner, name) for owner, name in patched]

    def refuse(*args, **kwargs):
        raise AssertionError("tests/unit starts no process and no server: this test "
                             "belongs in tests/integration")

    for owner, name in patched:
        setattr(owner, name, refuse)
    try:
        yield
    finally:
        for (owner, name), value in zip(patched, saved, strict=True):
            setattr(owner, name, value)


def pytest_runtest_setup(item):
    """Before any fixture: a test in tests/unit that asks for a database or a browser."""
    needs = REAL_THINGS & set(getattr(item, "fixturenames", ()))
    if needs and (UNIT in item.path.parents or os.environ.get("PLANT_STORE_UNIT_GUARD")):
        pytest.fail(f"tests/unit starts nothing; this test asks for {sorted(needs)}: it "
                    "belongs in tests/integration")


def store_contract(name="test_stores.py"):
    """A store contract's tests (tests/unit/stores/``name``: the plant operations', or the
    outbox protocol's, test_outbox_contract.py), for a module that runs them on another
    store: ``globals().update(store_contract())`` and a ``store`` there."""
    path = UNIT / "stores" / name
    spec = importlib.util.spec_from_file_location(f"store_contract.{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: value for name, value in vars(module).items() if name.startswith("test_")}


def unit_twin(relative):
    """The tests/unit module (``relative`` to tests/unit) whose real-server half a
    tests/integration/*_live.py file is: the helpers both halves use live there once."""
    path = UNIT / relative
    spec = importlib.util.spec_from_file_location(f"unit_twin.{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
