"""require_https (plant_store.http.https): a request whose scheme is not https is refused 403
in the Error shape before its token is looked at, whether the scheme is the server's own or
a trusted proxy's word; an untrusted peer's X-Forwarded-Proto counts for nothing; the probes
stay plain."""

import logging

import pytest
import webtest

from plant_store.app import create_app
from plant_store.config import Config, ConfigError, load
from plant_store.http.middleware import MESSAGE
from plant_store.serving import server as clear_text
from plant_store.serving.server_quirks import undo_server_scheme
from plant_store.stores import MemoryStore
from plant_store.util.loopback import clear_text_urls, is_loopback
from plant_store.webhooks import NoWebhooks, start
from support.assertions import assert_error

PROXY = "127.0.0.1"
STRANGER = "192.0.2.66"
SECRET = "whsec_" + "A" * 32


def make(tokens, **settings):
    config = Config(store="memory", require_https=True, **settings)
    return webtest.TestApp(create_app(config, store=MemoryStore(), tokens=tokens))


def get(app, path="/plants", token=None, scheme="http", peer=PROXY, headers=None):
    environ = {"wsgi.url_scheme": scheme, "REMOTE_ADDR": peer}
    if token is not None:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    return app.get(path, headers=headers or {}, extra_environ=environ, status="*")


def test_it_is_off_by_default():
    assert Config().require_https is False


def test_plain_http_is_403_saying_to_use_https_with_a_valid_token_too(tokens, token):
    app = make(tokens)
    for sent in (token, "not-a-token", None):
        response = get(app, token=sent)
        assert assert_error(response, 403) == MESSAGE
        assert "HTTPS" in MESSAGE and "https://" in MESSAGE
        assert "WWW-Authenticate" not in response.headers  # the token was not looked at


def test_a_post_over_plain_http_creates_nothing(tokens, token):
    store = MemoryStore()
    app = webtest.TestApp(create_app(Config(store="memory", require_https=True), store=store,
                                     tokens=tokens))
    response = app.post_json("/plants", {"id": 1, "name": "x"}, status="*",
                             extra_environ={"HTTP_AUTHORIZATION": f"Bearer {token}"})
    assert_error(response, 403)
    assert len(store) == 0


def test_https_of_the_server_itself_is_served(tokens, token):
    app = make(tokens)
    assert get(app, token=token, scheme="https").status_int == 200
    assert_error(get(app, token="wrong", scheme="https"), 401)  # then the token is checked


@pytest.mark.parametrize(("proto", "status"), [("https", 200), ("http", 403)])
def test_a_trusted_proxys_x_forwarded_proto_is_the_scheme(tokens, token, proto, status):
    app = make(tokens, trusted_proxy=PROXY)
    response = get(app, token=token, headers={"X-Forwarded-Proto": proto})
    assert response.status_int == status


def test_a_trusted_proxys_forwarded_header_is_the_scheme_too(tokens, token):
    app = make(tokens, trusted_proxy=PROXY, trusted_proxy_headers="forwarded")
    assert get(app, token=token, headers={"Forwarded": "for=192.0.2.7;proto=https"}
               ).status_int == 200
    assert_error(get(app, token=token, headers={"Forwarded": "for=192.0.2.7;proto=http"}), 403)


@pytest.mark.parametrize("trusted", ["", PROXY])
def test_an_untrusted_peers_forged_x_forwarded_proto_is_ignored(tokens, token, trusted):
    """No trusted proxy at all, or a peer that is not it: the forged https is no https."""
    app = make(tokens, **({"trusted_proxy": trusted} if trusted else {}))
    forged = {"X-Forwarded-Proto": "https", "Forwarded": "proto=https"}
    assert_error(get(app, token=token, peer=STRANGER, headers=forged), 403)


def test_the_probes_stay_plain(tokens):
    app = make(tokens)
    assert get(app, "/health").status_int == 200
    assert get(app, "/ready").status_int == 200
    for path in ("/", "/openapi.json", "/docs", "/metrics", "/plants/1"):
        assert_error(get(app, path), 403)


def test_a_cors_preflight_over_plain_http_is_refused_with_cors_headers(tokens):
    app = make(tokens, cors_allow_origins="https://garden.example")
    response = app.options("/plants", status="*", headers={
        "Origin": "https://garden.example", "Access-Control-Request-Method": "POST"},
        extra_environ={"wsgi.url_scheme": "http"})
    assert_error(response, 403)
    assert response.headers["Access-Control-Allow-Origin"] == "https://garden.example"


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.9.9.9", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("LOCALHOST.", True), ("api.localhost", True),
    ("0.0.0.0", False), ("::", False), ("192.0.2.1", False), ("10.0.0.1", False),
    ("example.com", False), ("localhost.example.com", False), ("", False),
])
def test_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_clear_text_urls_are_plain_http_beyond_loopback():
    urls = ("http://hooks.example/new", "https://hooks.example/new", "http://127.0.0.1:9/x",
            "http://localhost/x", "HTTP://10.0.0.2/x", "http://[::1]:8/x")
    assert clear_text_urls(urls) == ["http://hooks.example/new", "HTTP://10.0.0.2/x"]


@pytest.mark.parametrize(("settings", "addresses", "exposed"), [
    ({}, ["0.0.0.0"], ["0.0.0.0"]),
    ({}, ["192.0.2.1", "::"], ["192.0.2.1", "::"]),
    ({}, ["127.0.0.1", "::1"], []),
    ({"trusted_proxy": "10.0.0.1"}, ["0.0.0.0"], []),
    ({"require_https": True}, ["0.0.0.0"], []),
])
def test_serving_beyond_loopback_in_the_clear_is_found(settings, addresses, exposed):
    assert clear_text.exposed(Config(**settings), addresses) == exposed
    assert clear_text.exposed(Config(**settings), addresses, tls=True) == []


def test_the_start_warning_is_one_line_naming_the_risk(caplog):
    with caplog.at_level(logging.WARNING, "plant_store.server"):
        clear_text.warn_if_exposed(Config(host="0.0.0.0"), ["0.0.0.0"])
        clear_text.warn_if_exposed(Config(), ["127.0.0.1"])
    [record] = caplog.records
    message = record.getMessage()
    assert "\n" not in message and "0.0.0.0" in message
    assert "bearer tokens" in message and "in the clear" in message


def test_a_plain_http_webhook_url_is_warned_of_once_at_start(caplog):
    config = Config(only={"webhook_urls"}, webhook_urls="http://hooks.example/new "
                                                        "https://b.example/ http://127.0.0.1:9/")
    with caplog.at_level(logging.WARNING, "plant_store.webhooks"):
        assert isinstance(start(config, MemoryStore()), NoWebhooks)  # no secret: no worker
    [record] = [r for r in caplog.records if "plain http" in r.getMessage()]
    message = record.getMessage()
    assert "\n" not in message and "http://hooks.example/new" in message
    assert "127.0.0.1" not in message and "b.example" not in message
    assert "signatures travel in the clear" in message


def test_no_warning_for_https_and_loopback_webhook_urls(caplog):
    config = Config(only={"webhook_urls"}, webhook_urls="https://b.example/ http://localhost:9/")
    with caplog.at_level(logging.WARNING, "plant_store.webhooks"):
        start(config, MemoryStore())
    assert not caplog.records


def test_require_https_refuses_a_plain_http_webhook_url_in_one_line():
    env = {"PLANT_STORE_REQUIRE_HTTPS": "true", "PLANT_STORE_WEBHOOK_SECRET": SECRET,
           "PLANT_STORE_WEBHOOK_URLS": "https://a.example/ http://hooks.example/new"}
    with pytest.raises(ConfigError) as refused:
        load(None, env)
    message = str(refused.value)
    assert "\n" not in message and "http://hooks.example/new" in message
    assert "require_https" in message
    # https and loopback URLs are taken; without require_https, the plain one is too.
    assert load(None, {**env, "PLANT_STORE_WEBHOOK_URLS": "https://a.example/ "
                                                          "http://127.0.0.1:9/"}).require_https
    assert not load(None, {**env, "PLANT_STORE_REQUIRE_HTTPS": "false"}).require_https


@pytest.mark.parametrize(("environ", "scheme"), [
    ({"HTTP_X_FORWARDED_PROTO": "https", "uwsgi.version": b"2"}, "http"),  # uWSGI's, undone
    ({"HTTP_X_FORWARDED_SSL": "on"}, "http"),
    ({"HTTP_X_FORWARDED_PROTO": "https", "uwsgi.version": b"2", "HTTPS": "on"}, "https"),
    ({"HTTP_X_FORWARDED_PROTO": "https"}, "https"),  # another server's TLS of its own
    ({}, "https"),
])
def test_a_servers_own_reading_of_a_forwarded_scheme_is_undone(environ, scheme):
    environ = {"wsgi.url_scheme": "https", **environ}
    undo_server_scheme(environ)
    assert environ["wsgi.url_scheme"] == scheme
    assert "HTTP_X_FORWARDED_SSL" not in environ  # X-Forwarded-Proto stays: a trusted proxy's
