"""The public embedding and testing API: plant_store.testing, StaticTokens, create_app's
refusals, access lines through a host's logging, and the docs' examples, run as a user would."""

import io
import logging
import pathlib
import time

import pytest
import webtest

from plant_store import testing
from plant_store.app import create_app
from plant_store.config import Config, ConfigError
from plant_store.http import access_log
from plant_store.stores import MemoryStore
from plant_store.testing import make_app
from plant_store.tokens import StaticTokens, TokenFile


def test_make_app_accepts_its_tokens_only():
    app = webtest.TestApp(make_app(tokens={"a-token": "alice"}))
    app.get("/plants", headers={"Authorization": "Bearer a-token"}, status=200)
    app.get("/plants", headers={"Authorization": "Bearer other"}, status=401)


def test_static_tokens():
    tokens = StaticTokens(["one", "two"])
    assert (tokens.verify("two"), tokens.verify("three"), len(tokens)) == ("token 2", None, 2)
    assert StaticTokens({"t": "ci"}).verify("t") == "ci"


def test_create_app_opens_nothing_and_asks_for_what_it_needs(tmp_path, monkeypatch):
    """Issue 44: the composition root opens nothing (the Service does): a store and tokens
    are passed in, or the call fails at once, naming them; nothing is made on disk."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match="store"):
        create_app(Config(), tokens=StaticTokens(["t"]))
    with pytest.raises(TypeError, match="tokens"):
        create_app(Config(store="memory"), store=MemoryStore())
    assert list(tmp_path.iterdir()) == []  # no ./plant-store-data was made


def test_create_app_refuses_webhook_urls_without_a_worker_in_one_line():
    config = Config(store="memory", webhook_urls="http://127.0.0.1:9/hook",
                    webhook_secret="whsec_" + "A" * 32)
    with pytest.raises(ConfigError, match="no worker delivers") as raised:
        create_app(config, store=MemoryStore(), tokens=StaticTokens(["t"]))
    assert "\n" not in str(raised.value)


def test_without_metrics_the_app_counts_nothing_and_serves_no_metrics():
    app = webtest.TestApp(create_app(Config(store="memory"), store=MemoryStore(),
                                     tokens=StaticTokens(["t"]), log_stream=io.StringIO()))
    app.get("/metrics", headers={"Authorization": "Bearer t"}, status=404)
    app.get("/plants", headers={"Authorization": "Bearer t"}, status=200)


def test_the_service_opens_the_named_data_dir_and_closes_it(tmp_path):
    from plant_store.service import Service

    with Service(Config(data_dir=str(tmp_path / "d")), log_stream=io.StringIO()) as service:
        webtest.TestApp(service.app).get("/health")
        assert (tmp_path / "d").is_dir()
        app = webtest.TestApp(service.app)
        token = TokenFile(str(tmp_path / "d" / "tokens.json")).add("t")
        app.get("/metrics", headers={"Authorization": f"Bearer {token}"}, status=200)


class Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


def test_access_lines_reach_the_hosts_handlers_filters_and_levels():
    access_log.flush_all()  # earlier tests' lines
    kept = Kept()
    kept.addFilter(lambda record: "/health" not in record.getMessage())
    logger = logging.getLogger("plant_store.access")
    logger.addHandler(kept)
    logger.setLevel(logging.INFO)
    try:
        app = webtest.TestApp(make_app(tokens=["t"]))
        app.get("/plants", headers={"Authorization": "Bearer t"})
        app.get("/plants\x1b[2J", headers={"Authorization": "Bearer t"}, status=404)
        app.get("/health")  # quiet at info anyway
        access_log.flush_all()
        messages = [r.getMessage() for r in kept.records]
        assert [m.split()[:4] for m in messages] == [
            ["127.0.0.1", "GET", "/plants", "200"], ["127.0.0.1", "GET", "/plants\\x1b[2J", "404"]]
        record = kept.records[0]
        assert record.levelname == "INFO" and record.access["status"] == 200
        assert abs(record.created - time.time()) < 5
    finally:
        logger.removeHandler(kept)
        logger.setLevel(logging.NOTSET)


def test_a_host_that_configured_nothing_gets_no_access_lines_on_stderr(capfd):
    """Python's convention for a library: INFO goes nowhere until the host configures
    logging (before, every embedding app got the lines on stderr, whatever it wanted)."""
    app = webtest.TestApp(make_app(tokens=["t"]))
    app.get("/plants", headers={"Authorization": "Bearer t"})
    access_log.flush_all()
    assert "plant_store.access" not in capfd.readouterr().err


def test_a_raising_host_handler_ends_neither_the_flusher_nor_later_lines():
    """Hostile pass: a handler that raised killed the access-log thread for the process."""
    access_log.flush_all()
    kept, boom = Kept(), Kept()
    boom.emit = lambda record: 1 / 0
    boom.handleError = lambda record: (_ for _ in ()).throw(ZeroDivisionError)
    logger = logging.getLogger("plant_store.access")
    logger.setLevel(logging.INFO)
    logger.addHandler(boom)
    logger.addHandler(kept)
    try:
        app = webtest.TestApp(make_app(tokens=["t"]))
        app.get("/plants", headers={"Authorization": "Bearer t"})
        time.sleep(5 * access_log.FLUSH_INTERVAL)  # the flusher thread's turn
        logger.removeHandler(boom)
        app.get("/plants", headers={"Authorization": "Bearer t"}, status=200)
        deadline = time.monotonic() + 5
        while len(kept.records) < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert access_log._flusher.is_alive()
        assert len(kept.records) >= 1
    finally:
        logger.removeHandler(boom)
        logger.removeHandler(kept)
        logger.setLevel(logging.NOTSET)


def test_a_memory_store_app_takes_no_lock_in_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # a second app in the process too
        create_app(Config(store="memory"), store=MemoryStore(), tokens=StaticTokens(["t"]),
                   log_stream=io.StringIO())
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("settings,says", [
    ({"trusted_proxy_count": 0}, "trusted_proxy_count"),
    ({"page_size": 0}, "page_size"),
    ({"page_size": 2.5}, "page_size"),
    ({"page_size": True}, "page_size"),
    ({"max_body_size": -5}, "max_body_size"),
    ({"log_level": 10}, "log_level"),
    ({"page_size": None}, "must be a string, number"),
])
def test_typed_settings_are_checked_as_their_text_is(settings, says):
    with pytest.raises(ConfigError, match=says):
        make_app(**settings)


def test_typed_settings_that_are_right_are_taken():
    app = webtest.TestApp(make_app(tokens=["t"], trusted_proxy=["127.0.0.1", "10.0.0.0/8"],
                                   trusted_proxy_headers=["x-forwarded-host"], page_size=1,
                                   fsync=False, url_prefix="/api"))
    assert app.get("/api/", headers={"X-Forwarded-Host": "p.example"},
                   extra_environ={"REMOTE_ADDR": "10.1.2.3"}).json["plants"] == (
        "http://p.example/api/plants")


def test_static_tokens_refuse_one_string_and_odd_labels():
    from plant_store.tokens import TokenError

    for bad in ("s3cret", {"t": None}, {"t": 5}, [""]):
        with pytest.raises(TokenError):
            StaticTokens(bad)


@pytest.mark.parametrize("bad", [[" padded "], ["two words"], ["tab\there"], ["é"], ["a=b"]])
def test_a_token_no_client_could_send_is_refused_when_the_app_is_made(bad):
    """Hostile round 4: make_app(tokens=[" padded "]) made an app whose token every
    request was refused with (the check strips and splits the header)."""
    from plant_store.tokens import TokenError

    with pytest.raises(TokenError, match="a token must be what a client can send"):
        make_app(tokens=bad)


def test_make_app_takes_static_tokens_and_says_what_else_it_takes():
    from plant_store.tokens import TokenError

    app = webtest.TestApp(make_app(tokens=StaticTokens({"t-1": "ci"})))
    app.get("/plants", headers={"Authorization": "Bearer t-1"}, status=200)
    with pytest.raises(TokenError, match=r"a list of tokens, a mapping .* not NoneType"):
        make_app(tokens=None)
    assert webtest.TestApp(make_app(tokens=["abc+/=="])).get(
        "/plants", headers={"Authorization": "Bearer abc+/=="}).status_int == 200


def _where_the_plugin_goes(text):
    """The sentence that says where ``pytest_plugins`` goes, its words only."""
    words = " ".join(text.split())
    start = words.index('``pytest_plugins = ["plant_store.testing"]``')
    return words[start:words.index(" gives ", start)]


def test_the_testing_docstring_and_the_embedding_page_put_pytest_plugins_in_one_place():
    """Issue 50, item 8: the docstring said a conftest.py, the page's example a test module;
    pytest takes either, but a conftest.py only at the top (its rootdir)."""
    page = (pathlib.Path(__file__).parents[2] / "docs" / "embedding.rst").read_text()
    said = _where_the_plugin_goes(testing.__doc__ or "")
    assert said == _where_the_plugin_goes(page)
    assert "test module" in said and "``conftest.py`` at the top" in said, said
