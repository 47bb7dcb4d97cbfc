"""Behind a real nginx, running conf/nginx.conf.example with only its ports and certificate
replaced (tests/support/proxies.py; test_proxies.py runs the same checks behind every proxy), over
HTTPS, as the example serves, the client verifying the session's test certificate."""

import json
import re
import selectors
import ssl
import time

import pytest

from support.proxies import NGINX, Nginx, certificates
from support.servers import Server, parse_answer

EXAMPLE = Nginx.example

pytestmark = pytest.mark.skipif(
    NGINX is None, reason="nginx is not installed (.ci/run installs Debian's nginx)")


@pytest.fixture
def proxied(tmp_path):
    server = Server(tmp_path / "data", "--trusted-proxy", "127.0.0.1", "--url-prefix", "/api",
                    "--require-https", "true")
    nginx_dir = tmp_path / "nginx"
    nginx_dir.mkdir()
    nginx = Nginx(nginx_dir, server.port)
    try:
        yield server, nginx, server.first_token
    finally:
        nginx.stop()
        server.stop()


def assert_json_error(response, status):
    code, headers, body = response
    assert code == status
    assert headers["Content-Type"] == "application/json"
    assert set(body) == {"error", "message"} and body["error"] == status
    return body["message"]


def test_create_through_the_proxy_under_the_prefix(proxied):
    _server, nginx, token = proxied
    status, headers, body = nginx.request(
        "POST", "/api/plants", {"id": 1, "name": "Monstera", "tag": "aroid"}, token)
    assert (status, body) == (200, {"name": "Monstera", "tag": "aroid"})
    assert re.fullmatch(r"[0-9a-f]{32}", headers["X-Request-ID"])  # nginx's $request_id


def test_errors_keep_the_json_shape_through_the_proxy(proxied):
    _server, nginx, token = proxied
    assert_json_error(nginx.request("POST", "/api/plants", {"id": 1, "name": "x"}), 401)
    assert "id" in assert_json_error(
        nginx.request("POST", "/api/plants", {"id": "one", "name": "x"}, token), 400)
    # Over the service's limit and nginx's: nginx refuses it, in the service's shape.
    big = b'{"id": 1, "name": "' + b"x" * 70_000 + b'"}'
    assert "65536" in assert_json_error(nginx.request("POST", "/api/plants", big, token), 413)
    assert_json_error(nginx.request("GET", "/api/nowhere", token=token), 404)


def test_the_service_down_is_json_too(proxied):
    server, nginx, token = proxied
    server.stop()
    assert_json_error(nginx.request("POST", "/api/plants", {"id": 1, "name": "x"}, token), 503)


def test_forwarded_client_address_reaches_the_access_log(proxied):
    server, nginx, token = proxied
    # The client is 127.0.0.2; the service's peer is nginx, on 127.0.0.1.
    nginx.request("POST", "/api/plants", {"id": 2, "name": "Fern"}, token,
                  headers={"X-Request-ID": "trace-42"}, source="127.0.0.2")
    line = wait_for_line(server, "trace-42")
    assert line.split()[4:8] == ["127.0.0.2", "POST", "/api/plants", "200"]


@pytest.mark.parametrize("trusted", [[], ["--trusted-proxy", "127.0.0.1"]])
def test_forwarded_headers_from_an_untrusted_peer_are_ignored(tmp_path, trusted):
    # Without a trusted proxy, or from a peer that is not it, X-Forwarded-For is a lie.
    with Server(tmp_path / "data", "--log-level", "debug", *trusted) as server:
        server.request("GET", "/health", headers={"X-Forwarded-For": "10.9.9.9",
                                                  "X-Request-ID": "forged"},
                       source="127.0.0.2")
        server.stop()  # an orderly stop writes every access line
        line = next(line for line in server.stderr if "forged" in line)
        assert line.split()[4:8] == ["127.0.0.2", "GET", "/health", "200"]


def test_the_document_names_the_prefix(proxied):
    nginx = proxied[1]
    status, _, document = nginx.request("GET", "/api/openapi.json")
    assert status == 200
    assert document["servers"] == [{"url": f"https://127.0.0.1:{nginx.port}/api"}]


def test_plain_http_only_redirects_and_the_token_goes_no_further(proxied):
    server, nginx, token = proxied
    status, headers, _ = nginx.plain_request("POST", "/api/plants", {"id": 9, "name": "x"},
                                             token, headers={"X-Request-ID": "in-clear"})
    assert (status, headers["Location"]) == (301, "https://127.0.0.1/api/plants")
    assert nginx.request("GET", "/api/plants/9", token=token,
                         headers={"X-Request-ID": "then-tls"})[0] == 404
    wait_for_line(server, "then-tls")
    assert not [line for line in server.stderr if "in-clear" in line]


@pytest.mark.parametrize(("trusted", "source", "url"), [
    (True, None, "https://plants.example.com:8443"),   # the proxy's word is taken
    (True, "127.0.0.2", "http://{host}"),              # not the proxy: ignored
    (False, None, "http://{host}"),                    # no proxy configured: ignored
])
def test_scheme_and_host_come_from_a_trusted_proxy_only(tmp_path, trusted, source, url):
    flags = ["--trusted-proxy", "127.0.0.1"] if trusted else []
    with Server(tmp_path / "data", *flags) as server:
        forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "plants.example.com:8443"}
        status, _, document = server.request("GET", "/openapi.json", headers=forwarded,
                                              source=source)
        assert status == 200
        assert document["servers"] == [{"url": url.format(host=f"127.0.0.1:{server.port}")}]


@pytest.mark.slow
def test_slow_clients_neither_starve_others_nor_exceed_their_share(proxied):
    _server, nginx, token = proxied
    per_client = re.search(r"limit_conn plant_store_clients (\d+);", EXAMPLE.read_text())
    assert per_client, "the example sets no per-client limit"
    held = []

    def connect(data):
        sock = nginx.connect(source="127.0.0.2")
        held.append(sock)
        sock.sendall(data)
        return sock

    def timed_create(plant_id):
        started = time.monotonic()
        status, _, _ = nginx.request("POST", "/api/plants", {"id": plant_id, "name": "x"}, token)
        return status, time.monotonic() - started

    try:
        # Three times waitress's connection limit, each with half a header, then nothing.
        for _ in range(300):
            connect(b"POST /api/plants HTTP/1.1\r\nHost: x\r\nContent-Ty")
        for plant_id in range(5):  # another client is served as ever
            status, seconds = timed_create(plant_id)
            assert status == 200 and seconds < 1
        # Whole headers, a body that never comes: each holds a request in progress.
        head = ("POST /api/plants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Authorization: Bearer {token}\r\nContent-Length: 100\r\n\r\n{{").encode()
        flood = [connect(head) for _ in range(int(per_client[1]) + 10)]
        answers = read_answers(flood, seconds=2)
        assert len(answers) == 10  # only those beyond the limit are answered, at once
        for raw in answers:
            status, headers, body = parse_answer(raw)
            assert (status, headers["content-type"], body["error"]) == (
                429, "application/json", 429)
        status, seconds = timed_create(99)
        assert status == 200 and seconds < 1
    finally:
        for sock in held:
            sock.close()


def read_answers(socks, seconds):
    """What the server sent on each of ``socks`` (TLS sockets) that it answered within
    ``seconds``. Read without blocking: a socket may be readable for TLS's own records (a
    session ticket) with no answer in them."""
    answers = {}
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                try:
                    data = key.fileobj.recv(65536)
                except ssl.SSLWantReadError:
                    continue
                except (ssl.SSLEOFError, ConnectionResetError):
                    data = b""
                if data:
                    answers[key.fileobj] = answers.get(key.fileobj, b"") + data
                else:
                    selector.unregister(key.fileobj)
    return list(answers.values())


def wait_for_line(server, needle, timeout=5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in list(server.stderr):
            if needle in line:
                return line
        time.sleep(0.05)
    raise AssertionError(f"no log line with {needle!r}:\n" + "".join(server.stderr))


@pytest.mark.parametrize(("raw", "status"), [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET /api/health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", 400),
    (b"GET /api/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n", 400),
    (b"GET /api/" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    (b"GET /elsewhere HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    (b"GET /api HTTP/1.1\r\nHost: x\r\n\r\n", 404),  # not nginx's HTML redirect
    (b"TRACE /api/plants HTTP/1.1\r\nHost: x\r\n\r\n", 405),
    (b"POST /api/plants HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
    (b"GET /api/plants HTTP/2.0\r\nHost: x\r\n\r\n", 505),
])
def test_what_nginx_refuses_itself_is_json_too(proxied, raw, status):
    _, nginx, _ = proxied
    with nginx.connect() as sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data and data.rstrip().endswith(b"}"):
                break
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d" % status), head
    assert b"Content-Type: application/json" in head
    assert json.loads(body) == {"error": status, "message": json.loads(body)["message"]}


def test_deletes_through_nginx_keep_the_clients_connection(proxied):
    """Deletes through nginx keep the client's connection (the service keeps nginx's
    too: tests/integration/test_plant_update_http.py)."""
    import http.client

    _, nginx, token = proxied
    for plant_id in (1, 2):
        assert nginx.request("POST", "/api/plants", {"id": plant_id, "name": "x"}, token)[0] == 200
    conn = http.client.HTTPSConnection("127.0.0.1", nginx.port, timeout=5,
                                       context=certificates().context())
    try:
        for plant_id in (1, 2):  # both on one connection
            conn.request("DELETE", f"/api/plants/{plant_id}",
                         headers={"Authorization": f"Bearer {token}"})
            response = conn.getresponse()
            response.read()
            assert response.status == 204 and response.getheader("Connection") != "close"
    finally:
        conn.close()


def test_the_docs_page_loads_every_file_through_the_proxy(proxied, browser):
    """In a real browser: /api/docs finds its files and the document under /api/."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _, nginx, _ = proxied
    base = nginx.base
    browser.open(f"{base}/api/docs")
    WebDriverWait(browser.driver, 10, 0.05).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, ".opblock")) >= 7)
    server = browser.driver.find_element(By.CSS_SELECTOR, ".servers select").text
    browser.drain()
    assert browser.failures == [] and browser.console == []
    loaded = {url for url, status in browser.responses.items() if status == 200}
    assert {f"{base}/api/{path}" for path in (
        "docs", "openapi.json", "docs/swagger-ui-bundle.js", "docs/swagger-ui.css",
        "docs/docs_page.js")} <= loaded
    assert all(url.startswith(f"{base}/api/docs") or url == f"{base}/api/openapi.json"
               for url in loaded if not url.startswith("data:")), loaded
    assert server == f"{base}/api"  # where "Try it out" sends its requests
