"""Each reverse proxy's shipped example (conf/, run by tests/support/proxies.py with only its ports
replaced) in front of each way of serving the app, set up as the example's header comment
says: the API under /api/, the URLs the service emits naming the proxy, the client's own
address in the access log, nothing a client forges in a forwarded header believed, and the
proxy's own answers in the service's Error shape. Every example terminates TLS (a certificate
from the session's throwaway CA, tests/support/proxies.py, verified by the client): the service sees
https as the scheme, and plain HTTP to the example's port 80 is only a redirect that never
reaches the service.

The quick set (plain ``pytest``) runs every proxy in front of ``plant-store serve``, and
nginx in front of gunicorn and uWSGI; ``pytest -m topology`` runs the rest of the matrix,
``plant-store serve --server granian`` among it. The forged underscore headers' test runs
every proxy in front of both of ``plant-store serve``'s servers, waitress and granian.
"""

import contextlib
import http.server
import os
import re
import signal
import ssl
import threading
import time
from urllib.parse import urlsplit

import pytest

from support.prefork import APP, BIN, WsgiServer
from support.proxies import Apache, Caddy, CaddyStripPrefix, HAProxy, Nginx, missing
from support.servers import Server, free_port, http_request, parse_answer

PROXIES = {proxy.name: proxy for proxy in (Nginx, Apache, Caddy, HAProxy, CaddyStripPrefix)}
SERVERS = ("serve", "granian", "gunicorn", "uwsgi")
QUICK = {(name, "serve") for name in PROXIES} | {("nginx", "gunicorn"), ("nginx", "uwsgi")}

# The X-Request-ID each proxy makes when the client sends none.
MADE_IDS = {
    "nginx": r"[0-9a-f]{32}",                              # $request_id
    "apache": r"[A-Za-z0-9@_-]{20,}",                      # mod_unique_id
    "caddy": r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}",  # {http.request.uuid}
    "haproxy": r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}",  # %[uuid]
}
MADE_IDS["caddy-strip-prefix"] = MADE_IDS["caddy"]

# What a client may send to be believed as someone else, somewhere else.
FORGED = {
    "X-Forwarded-For": "6.6.6.6",
    "X-Forwarded-Proto": "https",
    "X-Forwarded-Host": "evil.example",
    "X-Forwarded-Port": "6666",
    "X-Forwarded-Prefix": "/evil",
    "Forwarded": "for=6.6.6.6;proto=https;host=evil.example",
}

# The same headers with an underscore for a hyphen, in each case and mix a client may write:
# granian (and uWSGI) read `X_Forwarded_For` as `X-Forwarded-For` (both are the WSGI key
# HTTP_X_FORWARDED_FOR, the line that comes last winning), so a proxy that passes such a
# header on after its own lets the client choose its address, host and scheme.
UNDERSCORE_STYLES = ("X_Forwarded_{}", "x_forwarded_{}", "X_FORWARDED_{}", "X-Forwarded_{}",
                     "X_Forwarded-{}", "x-forwarded_{}")


def underscored(style, index=6):
    """Forged forwarded headers, the names in ``style`` (one of UNDERSCORE_STYLES), after the
    hyphenated ones a client may send too (so a proxy that replaces a header where the
    client put it writes its own before the forged one)."""
    return {
        "X-Forwarded-For": "1.1.1.1", "X-Forwarded-Host": "also-evil.example",
        "X-Forwarded-Proto": "https",
        style.format("For"): f"6.6.6.{index}",
        style.format("Host"): "evil.example",
        style.format("Proto"): "http",
        style.format("Port"): "6666",
        style.format("Prefix"): "/evil",
    }


def require(proxy_class):
    """``proxy_class``, or skip the test saying what is missing; in CI (``CI=true``) fail
    instead, since CI must run these tests (.ci/run installs every proxy)."""
    if reason := missing(proxy_class):
        if os.environ.get("CI") == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return proxy_class


def example_settings(example):
    """The service settings an example's header comment names (``#   name = value``, a
    value may go on on the next lines), as a dict."""
    settings, name = {}, None
    for line in example.read_text().splitlines():
        if match := re.fullmatch(r"#   ([a-z_]+) =(.*)", line):
            name = match[1]
            settings[name] = match[2].split(" #")[0].strip()
        elif name and (match := re.fullmatch(r"#\s{5,}([^#\s].*)", line)):
            settings[name] += " " + match[1].split(" #")[0].strip()
        elif not re.fullmatch(r"#\s{5,}#.*", line):
            name = None
    return settings


def test_each_example_names_its_settings():
    for proxy in PROXIES.values():
        settings = example_settings(proxy.example)
        assert settings["trusted_proxy"] == "127.0.0.1", proxy.name
        assert settings["url_prefix"] == ("" if proxy is CaddyStripPrefix else "/api")
        assert "trusted_proxy_headers" in settings
        assert settings["require_https"] == "true", proxy.name


class Service:
    """The app served by ``kind`` (serve: waitress, granian: ``serve --server granian``,
    gunicorn or uwsgi) with ``settings``; its access lines in ``lines``."""

    def __init__(self, kind, data_dir, settings):
        self.kind = kind
        if kind in ("serve", "granian"):
            flags = [arg for name, value in settings.items() if value
                     for arg in (f"--{name.replace('_', '-')}", value)]
            if kind == "granian":
                flags += ["--server", "granian"]
            self._server = Server(data_dir, *flags)
            self.port, self.token, self.lines = (
                self._server.port, self._server.first_token, self._server.stderr)
            return
        env = {f"PLANT_STORE_{name.upper()}": value for name, value in settings.items()}
        env["PLANT_STORE_LOG_LEVEL"] = "info"  # the access lines
        if kind == "gunicorn":
            command = [os.path.join(BIN, "gunicorn"), "-c", "python:plant_store.gunicorn_hooks",
                       "-b", "127.0.0.1:{port}", APP]
            stop_signal = signal.SIGTERM
        else:  # SIGINT stops uWSGI 2.0 (SIGTERM reloads it).
            # --http-socket closes each connection after its answer without saying so; a
            # proxy that keeps connections to the service then sends a request on a closed
            # one now and then, and answers it 502 (docs/proxies.rst). The header says so.
            command = [os.path.join(BIN, "uwsgi"), "--http-socket", "127.0.0.1:{port}",
                       "--add-header", "Connection: close",
                       "--module", APP, "--disable-logging"]
            stop_signal = signal.SIGINT
        self._server = WsgiServer(command, data_dir, env, stop_signal)
        self.port, self.token, self.lines = (
            self._server.port, self._server.token, self._server.output)

    def access_line(self, request_id, timeout=5):
        """The access line of the request ``request_id``: [address, method, path, status]."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if "[plant_store.access]" in line and line.rstrip().endswith(" " + request_id):
                    return line.split()[4:8]
            time.sleep(0.05)
        raise AssertionError(f"no access line for {request_id!r}:\n" + "".join(self.lines))

    def stop(self):
        self._server.stop()


def _combinations(servers=SERVERS, quick=QUICK):
    for kind in servers:
        for name in PROXIES:
            marks = [] if (name, kind) in quick else [pytest.mark.topology]
            yield pytest.param((name, kind), id=f"{name}-{kind}", marks=marks)


class Stack:
    def __init__(self, proxy, service):
        self.proxy, self.service, self.token = proxy, service, service.token
        self.base = proxy.base  # https


@pytest.fixture(params=list(_combinations()))
def stack(request, tmp_path):
    yield from _stack(request.param, tmp_path)


# Both of ``plant-store serve``'s servers behind every proxy, in the quick set.
BOTH_SERVERS = {(name, kind) for name in PROXIES for kind in ("serve", "granian")}
# An http {} context around nginx's example that lets headers with underscores through
# (nginx's defaults drop them): the example's own settings must hold there too.
ALLOWING_UNDERSCORES = "underscores_in_headers on; ignore_invalid_headers off;"


BOTH_PARAMS = list(_combinations(("serve", "granian"), BOTH_SERVERS))


@pytest.fixture(params=BOTH_PARAMS)
def served_stack(request, tmp_path):
    """A stack with waitress or granian (``plant-store serve``'s two servers) behind it;
    nginx's example inside an http {} context that allows underscores in header names."""
    yield from _stack(request.param, tmp_path, nginx_http_context=ALLOWING_UNDERSCORES)


@pytest.fixture(params=BOTH_PARAMS)
def rate_limited_stack(request, tmp_path):
    """As ``served_stack``, the service limiting each client to 1 request a second, 3 at
    once (rate_limit = 1, rate_limit_burst = 2), and logging its quiet paths too (the
    document's, where the limit counts addresses)."""
    yield from _stack(request.param, tmp_path, nginx_http_context=ALLOWING_UNDERSCORES,
                      rate_limit="1", rate_limit_burst="2", log_level="debug")


def _stack(param, tmp_path, nginx_http_context="", **settings):
    name, kind = param
    proxy_class = require(PROXIES[name])
    options = {"http_context": nginx_http_context} if proxy_class is Nginx else {}
    service = Service(kind, tmp_path / "data",
                      {**example_settings(proxy_class.example), **settings})
    try:
        (tmp_path / "proxy").mkdir()
        with proxy_class(tmp_path / "proxy", service.port, **options) as proxy:
            yield Stack(proxy, service)
    finally:
        service.stop()


def assert_json_error(response, statuses):
    status, headers, body = response
    assert status in statuses, (status, body)
    assert headers["Content-Type"] == "application/json", headers
    assert set(body) == {"error", "message"} and body["error"] == status, body
    assert body["message"].endswith("."), body  # a plain sentence, not a status phrase
    return status


def test_create_through_the_proxy_with_a_request_id(stack):
    status, headers, body = stack.proxy.request(
        "POST", "/api/plants", {"id": 1, "name": "Monstera", "tag": "aroid"}, stack.token)
    assert (status, body) == (200, {"name": "Monstera", "tag": "aroid"})
    assert re.fullmatch(MADE_IDS[stack.proxy.name], headers["X-Request-ID"]), headers
    status, headers, _ = stack.proxy.request(
        "POST", "/api/plants", {"id": 1, "name": "Monstera", "tag": "aroid"}, stack.token,
        headers={"X-Request-ID": "trace-7"})
    assert (status, headers["X-Request-ID"]) == (200, "trace-7")  # idempotent; the client's id
    assert headers["Strict-Transport-Security"] == "max-age=63072000"
    assert stack.service.access_line("trace-7")[1:] == ["POST", "/api/plants", "200"]


def test_plain_http_is_a_redirect_and_never_reaches_the_service(stack):
    """A token sent to the example's port 80 by mistake gets a redirect to https, and goes
    no further: the service logs no such request, and nothing is created."""
    body = {"id": 5, "name": "Leaked"}
    for method, path in (("POST", "/api/plants"), ("GET", "/api/plants?limit=1"),
                         ("GET", "/elsewhere")):
        status, headers, _ = stack.proxy.plain_request(
            method, path, body if method == "POST" else None, stack.token,
            headers={"X-Request-ID": "plain-1"})
        assert status in (301, 308), (method, path, status)  # Caddy: 308
        location = urlsplit(headers["Location"])
        assert (location.scheme, location.hostname) == ("https", "127.0.0.1"), location
        assert f"{location.path}?{location.query}".rstrip("?") == path
    status, _, _ = stack.proxy.request("GET", "/api/plants/5", token=stack.token,
                                       headers={"X-Request-ID": "after-1"})
    assert status == 404
    stack.service.access_line("after-1")  # every line before it is written too
    assert not [line for line in stack.service.lines if "plain-1" in line]


def test_the_service_refuses_plain_http_that_bypasses_the_proxy(stack):
    """require_https, as each example's settings say: a token sent to the service's own
    port over plain HTTP is refused before it is checked, and a forged X-Forwarded-Proto
    from a peer that is not the trusted proxy changes nothing; the probes stay plain."""
    port = stack.service.port
    for headers in ({}, {"X-Forwarded-Proto": "https", "Forwarded": "proto=https"}):
        status, _, body = http_request("127.0.0.1", port, "POST", "/api/plants",
                                       {"id": 6, "name": "x"}, stack.token, headers=headers,
                                       source="127.0.0.2")
        assert status == 403 and "HTTPS" in body["message"], body
    assert http_request("127.0.0.1", port, "GET", "/health")[0] == 200
    assert stack.proxy.request("GET", "/api/plants/6", token=stack.token)[0] == 404


@pytest.mark.parametrize("forged", [{}, FORGED], ids=["plain", "forged"])
def test_links_and_the_document_name_the_proxy(stack, forged):
    for plant_id in (1, 2):
        assert stack.proxy.request("POST", "/api/plants", {"id": plant_id, "name": "x"},
                                   stack.token)[0] == 200
    status, headers, body = stack.proxy.request("GET", "/api/plants?limit=1", token=stack.token,
                                                headers=forged)
    assert (status, body) == (200, [{"name": "x"}])
    assert headers["Link"] == f"<{stack.base}/api/plants?limit=1&cursor=1>; rel=next"
    status, _, document = stack.proxy.request("GET", "/api/openapi.json", headers=forged)
    assert status == 200
    assert document["servers"][0]["url"] == f"{stack.base}/api"


@pytest.mark.parametrize("forged", [{}, FORGED], ids=["plain", "forged"])
def test_the_clients_own_address_reaches_the_access_log(stack, forged):
    # The client is 127.0.0.2; the service's peer is the proxy, on 127.0.0.1.
    status, _, _ = stack.proxy.request(
        "POST", "/api/plants", {"id": 3, "name": "Fern"}, stack.token,
        headers={**forged, "X-Request-ID": "trace-42"}, source="127.0.0.2")
    assert status == 200
    assert stack.service.access_line("trace-42") == ["127.0.0.2", "POST", "/api/plants", "200"]


def test_forged_underscore_headers_change_nothing_the_service_sees(served_stack):
    """A client's ``X_Forwarded_For``, ``-Host`` and ``-Proto`` (underscores, each case and
    mix) change neither the address the service logs, nor the host and scheme in the URLs
    it emits, nor what require_https sees (a believed ``http`` would be a 403), on waitress
    and on granian alike. (waitress drops such headers itself; granian reads them as the
    hyphenated ones, the last line winning, so only the proxy can drop them.)"""
    stack = served_stack
    for plant_id in (1, 2):
        assert stack.proxy.request("POST", "/api/plants", {"id": plant_id, "name": "x"},
                                   stack.token)[0] == 200
    seen = {}
    for index, style in enumerate(UNDERSCORE_STYLES):
        request_id = f"underscore-{index}"
        status, headers, _ = stack.proxy.request(
            "GET", "/api/plants?limit=1", token=stack.token, source="127.0.0.2",
            headers={**underscored(style, index), "X-Request-ID": request_id})
        seen[style] = (status, headers.get("Link"),
                       stack.service.access_line(request_id)[0])
    link = f"<{stack.base}/api/plants?limit=1&cursor=1>; rel=next"
    assert seen == {style: (200, link, "127.0.0.2") for style in UNDERSCORE_STYLES}


def test_forged_underscore_addresses_do_not_escape_the_rate_limit(rate_limited_stack):
    """Issue 49's finding: a client that names a new address in each request's
    ``X_Forwarded_For`` (or a spelling of it) is still one client to the rate limit, its
    own address (on a path open without a token, where the limit counts addresses). Its
    own ``X-Forwarded-For`` goes first: Apache puts its header in that one's place."""
    stack = rate_limited_stack
    statuses, addresses = [], set()
    for index in range(5):
        style = UNDERSCORE_STYLES[index % len(UNDERSCORE_STYLES)]
        request_id = f"limited-{index}"
        statuses.append(stack.proxy.request(
            "GET", "/api/openapi.json", source="127.0.0.2",
            headers={"X-Forwarded-For": "1.1.1.1", style.format("For"): f"6.6.6.{index}",
                     "X-Request-ID": request_id})[0])
        addresses.add(stack.service.access_line(request_id)[0])
    # 3 at once, then 1 a second: 5 requests in under 2 s meet at least one 429.
    assert statuses[:3] == [200, 200, 200] and 429 in statuses[3:], statuses
    assert addresses == {"127.0.0.2"}


@pytest.mark.slow
def test_the_proxys_own_answers_are_json(stack):
    assert_json_error(stack.proxy.request("GET", "/elsewhere"), {404})
    assert_json_error(stack.proxy.request("GET", "/api"), {404})
    assert_json_error(too_large(stack.proxy, stack.token), {413})
    # The service's own errors pass as they are.
    assert_json_error(stack.proxy.request("POST", "/api/plants", {"id": 1, "name": "x"}), {401})
    stack.service.stop()
    assert_json_error(stack.proxy.request("POST", "/api/plants", {"id": 1, "name": "x"},
                                          stack.token), {502, 503, 504})


def too_large(proxy, token):
    """The proxy's answer to a create whose Content-Length is over 64 KiB, asked with
    ``Expect: 100-continue``: the body is sent only if the proxy invites it. (Sent at once,
    over TLS, the proxy's close after its 413 often cuts the client's sending short before
    it reads the answer.)"""
    body = b'{"id": 1, "name": "' + b"x" * 70_000 + b'"}'
    head = (f"POST /api/plants HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n").encode()
    with proxy.connect(timeout=10) as sock:
        sock.sendall(head)
        raw = b""
        with contextlib.suppress(ssl.SSLEOFError, ConnectionResetError, BrokenPipeError):
            while not raw.endswith(b"}") and (chunk := sock.recv(65536)):
                raw += chunk
                if raw.startswith(b"HTTP/1.1 100 ") and raw.endswith(b"\r\n\r\n"):
                    # Invited (HAProxy invites, then counts): the answer may come, and the
                    # connection close, while it is sent.
                    with contextlib.suppress(ssl.SSLEOFError, ConnectionResetError,
                                             BrokenPipeError):
                        sock.sendall(body)
    status, headers, answer = parse_answer(raw)
    return status, {"Content-Type": headers.get("content-type")}, answer


class Recorder(http.server.ThreadingHTTPServer):
    """An upstream that answers every request 200 with ``{}`` and keeps what it was sent:
    (path, headers) in ``seen``."""

    daemon_threads = True

    def __init__(self):
        self.seen = []
        seen = self.seen

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                seen.append((self.path, self.headers))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", free_port()), Handler)
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05})
        self.thread.start()

    def stop(self):
        self.shutdown()
        self.server_close()
        self.thread.join(5)


@pytest.mark.parametrize("name", list(PROXIES))
def test_each_forwarded_header_is_the_proxys_own(tmp_path, name):
    """What reaches the service is one value of each, the proxy's: never the client's,
    never the client's and the proxy's appended."""
    proxy_class = require(PROXIES[name])
    upstream = Recorder()
    try:
        with proxy_class(tmp_path, upstream.server_port) as proxy:
            status, _, _ = proxy.request("GET", "/api/plants?limit=1", headers=FORGED,
                                         source="127.0.0.2")
            assert status == 200
    finally:
        upstream.stop()
    [(path, headers)] = upstream.seen
    strips = proxy_class is CaddyStripPrefix
    assert path == ("/plants?limit=1" if strips else "/api/plants?limit=1")
    assert {name: headers.get_all(name) for name in FORGED} == {
        "X-Forwarded-For": ["127.0.0.2"],
        "X-Forwarded-Proto": ["https"],
        "X-Forwarded-Host": [f"127.0.0.1:{proxy.port}"],
        "X-Forwarded-Port": [str(proxy.port)],
        "X-Forwarded-Prefix": ["/api"] if strips else None,
        "Forwarded": None,
    }
    assert headers.get_all("Host") == [f"127.0.0.1:{proxy.port}"]  # the client's Host
    assert headers.get("X-Forwarded-Server") is None


@pytest.mark.parametrize("name", list(PROXIES))
def test_no_header_with_an_underscore_reaches_the_service(tmp_path, name):
    """Forwarded headers spelt with underscores, in every case and mix, are dropped at the
    edge (as nginx and waitress drop every header whose name has one): none reaches the
    service, where granian would read one as the hyphenated header. nginx's example holds
    even in an http {} context that lets such headers through."""
    proxy_class = require(PROXIES[name])
    upstream = Recorder()
    options = {"http_context": ALLOWING_UNDERSCORES} if proxy_class is Nginx else {}
    try:
        with proxy_class(tmp_path, upstream.server_port, **options) as proxy:
            for index, style in enumerate(UNDERSCORE_STYLES):
                assert proxy.request("GET", "/api/plants?limit=1", source="127.0.0.2",
                                     headers=underscored(style, index))[0] == 200
    finally:
        upstream.stop()
    passed = [(style, header)
              for style, (_, headers) in zip(UNDERSCORE_STYLES, upstream.seen, strict=True)
              for header in headers if "_" in header]
    assert passed == []
    for _, headers in upstream.seen:
        assert headers.get_all("X-Forwarded-For") == ["127.0.0.2"]
        assert headers.get_all("X-Forwarded-Host") == [f"127.0.0.1:{proxy.port}"]
        assert headers.get_all("X-Forwarded-Proto") == ["https"]


# What each proxy does with a client that stalls its headers, as the examples' header
# comments say: nginx closes without a word, Apache answers a JSON 408; Caddy (Go's server)
# a plain-text 400 and HAProxy an HTML 408, which neither lets its configuration change.
STALLED = {"nginx": None, "apache": (408, True), "caddy": (400, False),
           "caddy-strip-prefix": (400, False), "haproxy": (408, False)}


@pytest.mark.topology  # about 10 s each
@pytest.mark.parametrize("name", list(PROXIES))
def test_a_client_that_stalls_its_headers_is_cut_off(tmp_path, name):
    """Half a request and then nothing: the proxy closes the connection after its header
    timeout (10 s in each example), and the service never hears of it."""
    proxy_class = require(PROXIES[name])
    upstream = Recorder()
    try:
        with proxy_class(tmp_path, upstream.server_port) as proxy, proxy.connect(
                timeout=25) as sock:
            started = time.monotonic()
            sock.sendall(b"POST /api/plants HTTP/1.1\r\nHost: x\r\nContent-Ty")
            answer = b""
            with contextlib.suppress(ssl.SSLEOFError, ConnectionResetError):
                while chunk := sock.recv(65536):  # until the proxy closes (timeout: 25 s)
                    answer += chunk
            waited = time.monotonic() - started
    finally:
        upstream.stop()
    assert 5 < waited < 21, waited
    assert upstream.seen == []
    if STALLED[name] is None:
        assert answer == b""
    else:
        status, headers, body = parse_answer(answer)
        expected, json_answer = STALLED[name]
        assert status == expected, answer
        assert (headers["content-type"] == "application/json") == json_answer, answer
        if json_answer:
            assert body["error"] == status, answer


def test_haproxy_refuses_more_than_20_connections_from_one_address(tmp_path):
    """The example's stick table: a client's 21st open connection is answered a JSON 429;
    another address is served as ever."""
    require(HAProxy)
    upstream = Recorder()
    held = []
    try:
        with HAProxy(tmp_path, upstream.server_port) as proxy:
            for _ in range(20):
                held.append(proxy.connect(source="127.0.0.2"))
            deadline = time.monotonic() + 5  # until HAProxy has accepted all 20
            while (answer := proxy.request("GET", "/api/plants", source="127.0.0.2"))[0] == 200:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert_json_error(answer, {429})
            assert proxy.request("GET", "/api/plants", source="127.0.0.3")[0] == 200
            held.pop().close()
            deadline = time.monotonic() + 5  # until HAProxy has seen the close
            while proxy.request("GET", "/api/plants", source="127.0.0.2")[0] != 200:
                assert time.monotonic() < deadline
                time.sleep(0.05)
    finally:
        for sock in held:
            sock.close()
        upstream.stop()
