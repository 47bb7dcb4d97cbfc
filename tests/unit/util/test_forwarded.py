"""Forwarded headers and the URL prefix, applied around the app by one WSGI wrapper
(plant_store.util.forwarded, which create_app puts there): in process with WebTest, and
mounted in a host application."""

import io

import pytest
import webtest
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.http import access_log
from plant_store.http import operational as docs_page
from plant_store.stores import MemoryStore
from plant_store.util.forwarded import ForwardedHeaders
from support.addresses import CLIENT

PROXY = "127.0.0.1"
def make(tokens, **settings):
    return webtest.TestApp(create_app(Config(store="memory", **settings), store=MemoryStore(),
                                      tokens=tokens), extra_environ={"REMOTE_ADDR": PROXY})


def servers_url(app, headers=None, remote=PROXY, path="/openapi.json"):
    answer = app.get(path, headers=headers or {}, extra_environ={"REMOTE_ADDR": remote})
    return answer.json["servers"][0]["url"]


def rewritten(headers, trusted="127.0.0.1", names=("x-forwarded-for", "x-forwarded-proto",
              "x-forwarded-host"), count=1, prefix="", remote=PROXY, path="/plants"):
    environ = {"REMOTE_ADDR": remote, "PATH_INFO": path, "SCRIPT_NAME": "",
               "wsgi.url_scheme": "http", "HTTP_HOST": "inner:8080", "SERVER_PORT": "8080"}
    environ.update({"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()})
    ForwardedHeaders(None, trusted, names, count, prefix).rewrite(environ)
    return environ


def test_a_trusted_proxy_tells_the_scheme_host_and_client(tokens):
    app = make(tokens, trusted_proxy=PROXY)
    url = servers_url(app, {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "plants.example",
                            "X-Forwarded-For": CLIENT})
    assert url == "https://plants.example"


def test_an_untrusted_peer_is_not_believed_and_its_headers_are_removed():
    environ = rewritten({"X-Forwarded-For": "6.6.6.6", "X-Forwarded-Host": "evil.example",
                         "X-Forwarded-Prefix": "/evil", "Forwarded": "for=6.6.6.6"},
                        remote="10.1.1.1")
    assert (environ["REMOTE_ADDR"], environ["HTTP_HOST"], environ["SCRIPT_NAME"]) == (
        "10.1.1.1", "inner:8080", "")
    assert not [key for key in environ if "FORWARDED" in key]


def test_without_a_trusted_proxy_every_forwarded_header_is_removed():
    environ = rewritten({"X-Forwarded-For": "6.6.6.6", "Forwarded": "for=6.6.6.6"}, trusted="")
    assert environ["REMOTE_ADDR"] == PROXY
    assert not [key for key in environ if "FORWARDED" in key]


def test_only_the_hop_the_trusted_proxy_wrote_is_believed():
    # A client's own X-Forwarded-For sits left of what the proxy appended.
    environ = rewritten({"X-Forwarded-For": "6.6.6.6, 192.0.2.7",
                         "X-Forwarded-Host": "evil.example,plants.example"})
    assert (environ["REMOTE_ADDR"], environ["HTTP_HOST"]) == (CLIENT, "plants.example")


def test_two_proxies_in_a_row():
    environ = rewritten({"X-Forwarded-For": "6.6.6.6, 192.0.2.7, 10.0.0.2"}, count=2)
    assert environ["REMOTE_ADDR"] == CLIENT
    # Fewer hops than proxies: the header is not believed at all.
    environ = rewritten({"X-Forwarded-For": "192.0.2.7"}, count=2)
    assert environ["REMOTE_ADDR"] == PROXY


@pytest.mark.parametrize("trusted,remote,believed", [
    ("10.0.0.0/8 127.0.0.1", "10.20.30.40", True),
    ("10.0.0.0/8 127.0.0.1", "11.0.0.1", False),
    ("*", "203.0.113.9", True),
    ("::1", "::1", True),
    ("127.0.0.1", "", False),  # a Unix socket's peer has no address: only '*' trusts it
    # A dual-stack listener (granian on ::) sees an IPv4 proxy as IPv4-mapped: the same peer
    # (the hostile pass on issue 51).
    ("127.0.0.1", "::ffff:127.0.0.1", True),
    ("10.0.0.0/8", "::ffff:10.1.2.3", True),
    ("10.0.0.0/8", "::ffff:11.1.2.3", False),
])
def test_trusted_proxies_are_addresses_or_networks(trusted, remote, believed):
    environ = rewritten({"X-Forwarded-For": CLIENT}, trusted=trusted, remote=remote)
    assert (environ["REMOTE_ADDR"] == CLIENT) is believed


@pytest.mark.parametrize("headers,expected", [
    ({"X-Forwarded-For": "not-an-address"}, {"REMOTE_ADDR": PROXY}),
    ({"X-Forwarded-For": "[2001:db8::1]:4711"}, {"REMOTE_ADDR": "2001:db8::1"}),
    ({"X-Forwarded-For": "192.0.2.7:5000"}, {"REMOTE_ADDR": CLIENT}),
    ({"X-Forwarded-Proto": "gopher"}, {"wsgi.url_scheme": "http"}),
    ({"X-Forwarded-Proto": "HTTPS"}, {"wsgi.url_scheme": "https"}),
    ({"X-Forwarded-Host": "evil.example/path?x"}, {"HTTP_HOST": "inner:8080"}),
    ({"X-Forwarded-Host": "a b"}, {"HTTP_HOST": "inner:8080"}),
    ({"X-Forwarded-Host": "[2001:db8::1]:8443"}, {"HTTP_HOST": "[2001:db8::1]:8443"}),
])
def test_a_value_that_does_not_parse_is_ignored(headers, expected):
    environ = rewritten(headers)
    assert {key: environ[key] for key in expected} == expected


@pytest.mark.parametrize("header,expected", [
    ('for="[2001:db8:cafe::17]:4711";proto=https;host=plants.example',
     ("2001:db8:cafe::17", "https", "plants.example")),
    ("for=6.6.6.6;host=evil.example, for=192.0.2.7;proto=https",
     (CLIENT, "https", "inner:8080")),
    ('for=192.0.2.7;host="a;b,c"', (CLIENT, "http", "inner:8080")),  # a host no URL has
    ("For=192.0.2.7;PROTO=https", (CLIENT, "https", "inner:8080")),  # names: any case
    ("for=192.0.2.7;for=6.6.6.6", (PROXY, "http", "inner:8080")),  # a name twice: nothing
    ("for=unknown;proto=https", (PROXY, "https", "inner:8080")),
    ("garbage", (PROXY, "http", "inner:8080")),
])
def test_rfc_7239_forwarded(header, expected):
    environ = rewritten({"Forwarded": header, "X-Forwarded-For": "6.6.6.6"},
                        names=("forwarded", "x-forwarded-for"))
    assert (environ["REMOTE_ADDR"], environ["wsgi.url_scheme"], environ["HTTP_HOST"]) == (
        expected)


def test_a_clients_quote_in_x_forwarded_for_swallows_no_proxy_hop():
    """Hostile round 4: X-Forwarded-For has no quoted strings, so a client's '"' in front
    of what an appending proxy (nginx's $proxy_add_x_forwarded_for) added must not join
    the two: the client was logged as the proxy."""
    environ = rewritten({"X-Forwarded-For": '", 192.0.2.7'})
    assert environ["REMOTE_ADDR"] == CLIENT
    environ = rewritten({"X-Forwarded-For": '"6.6.6.6, 192.0.2.7'})
    assert environ["REMOTE_ADDR"] == CLIENT


def test_a_clients_unbalanced_quote_in_forwarded_voids_no_proxy_element():
    environ = rewritten({"Forwarded": 'for="6.6.6.6, for=192.0.2.7;proto=https'},
                        names=("forwarded",))
    assert (environ["REMOTE_ADDR"], environ["wsgi.url_scheme"]) == (CLIENT, "https")


@pytest.mark.parametrize("value", ["fe80::1%a b c", "[fe80::1%a b c]:80", "fe80::1%" + "x" * 16,
                                   'fe80::1%"x"', "fe80::1%"])
def test_an_ipv6_scope_id_that_names_no_interface_is_not_believed(value):
    assert rewritten({"X-Forwarded-For": value})["REMOTE_ADDR"] == PROXY


def test_an_ipv6_scope_id_that_names_an_interface_is_kept():
    assert rewritten({"X-Forwarded-For": "[fe80::1%eth0]:80"})["REMOTE_ADDR"] == "fe80::1%eth0"


def test_forwarded_without_the_header_falls_back_to_x_forwarded():
    environ = rewritten({"X-Forwarded-For": CLIENT}, names=("forwarded", "x-forwarded-for"))
    assert environ["REMOTE_ADDR"] == CLIENT


def test_forwarded_port_and_prefix(tokens):
    app = make(tokens, trusted_proxy=PROXY, trusted_proxy_headers="x-forwarded-proto "
               "x-forwarded-host x-forwarded-port x-forwarded-prefix")
    headers = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "plants.example:8443",
               "X-Forwarded-Port": "9443", "X-Forwarded-Prefix": "/store/"}
    assert servers_url(app, headers) == "https://plants.example:9443/store"
    headers["X-Forwarded-Port"] = "443"  # the scheme's own port is left out
    assert servers_url(app, headers) == "https://plants.example/store"
    for bad in ("/../admin", "/a/./b", "relative", "/a b", "/%2e%2e", "/a?b", "/a#b"):
        headers["X-Forwarded-Prefix"] = bad
        assert servers_url(app, headers) == "https://plants.example", bad


def test_url_prefix_strips_the_path_and_prefixes_every_url(tokens):
    token = tokens.add("t")
    app = make(tokens, url_prefix="/api")
    auth = {"Authorization": f"Bearer {token}"}
    app.post_json("/api/plants", {"id": 1, "name": "Fern"}, headers=auth)
    app.post_json("/api/plants", {"id": 2, "name": "Ivy"}, headers=auth)
    answer = app.get("/api/plants?limit=1", headers=auth)
    assert answer.headers["Link"].startswith("<http://localhost:80/api/plants?limit=1&cursor=")
    assert servers_url(app, path="/api/openapi.json") == "http://localhost:80/api"
    assert app.get("/api").json["plants"] == "http://localhost:80/api/plants"
    # Tricks around the prefix reach no route.
    for path in ("/apiplants", "//api/plants", "/api/../plants", "/API/plants"):
        assert app.get(path, headers=auth, status=404).json["error"] == 404, path


def test_mounted_in_a_host_application(tokens):
    """Under werkzeug's DispatcherMiddleware at /plant-store, with url_prefix and a trusted
    proxy: the mount point, then the prefix, and the proxy's host, in every URL."""
    token = tokens.add("t")
    inner = create_app(Config(store="memory", url_prefix="/api", trusted_proxy=PROXY),
                       store=MemoryStore(), tokens=tokens)

    def host(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"host"]

    app = webtest.TestApp(DispatcherMiddleware(host, {"/plant-store": inner}),
                          extra_environ={"REMOTE_ADDR": PROXY})
    headers = {"Authorization": f"Bearer {token}", "X-Forwarded-Host": "plants.example"}
    app.post_json("/plant-store/api/plants", {"id": 1, "name": "Fern"}, headers=headers)
    app.post_json("/plant-store/api/plants", {"id": 2, "name": "Ivy"}, headers=headers)
    link = app.get("/plant-store/api/plants?limit=1", headers=headers).headers["Link"]
    assert link.startswith("<http://plants.example/plant-store/api/plants?limit=1&cursor=")
    assert app.get("/elsewhere").text == "host"


def test_the_index_needs_no_token_and_points_at_the_docs(tokens):
    app = make(tokens)
    assert app.get("/").json == {
        "service": "plant-store", "docs": "http://localhost:80/docs",
        "openapi": "http://localhost:80/openapi.json", "plants": "http://localhost:80/plants"}


def test_the_index_names_docs_only_where_the_page_is_installed(tokens, monkeypatch):
    """Issue 46: GET / advertised /docs on an install without the docs-page extra, where
    /docs answers 404."""
    monkeypatch.setattr(docs_page, "INSTALLED", False)
    app = make(tokens)
    assert "docs" not in app.get("/").json and app.get("/docs", status="*").status_int == 404


@pytest.mark.parametrize("host", ["evil.example/x?", "", "a>; rel=x, <http://evil"])
def test_a_host_header_that_is_no_host_never_reaches_a_url(tokens, host):
    """Hostile pass: the raw Host went into the index, the document and Link as sent."""
    token = tokens.add("t")
    app = make(tokens)
    auth = {"Authorization": f"Bearer {token}", "Host": host}
    for plant_id in (1, 2):
        app.post_json("/plants", {"id": plant_id, "name": "Fern"}, headers=auth)
    link = app.get("/plants?limit=1", headers=auth).headers["Link"]
    urls = [link, app.get("/", headers={"Host": host}).json["plants"],
            servers_url(app, {"Host": host})]
    assert all(url.startswith(("<http://localhost:80/", "http://localhost:80")) for url in urls)


def test_a_path_outside_the_prefix_is_served_and_logged_as_sent(tokens):
    stream = io.StringIO()
    app = webtest.TestApp(create_app(Config(store="memory", url_prefix="/api"),
                                     store=MemoryStore(), tokens=tokens, log_stream=stream))
    assert app.get("/").json["plants"] == "http://localhost:80/plants"
    app.get("/API/plants", status=401)
    access_log.flush_all()
    assert " GET /API/plants 401 " in stream.getvalue()


