"""The real-server half of tests/unit/http/test_https.py: ``plant-store serve`` with
require_https refuses plain HTTP (forged forwarded headers or not) and keeps the probes
plain, warns in one line when it takes tokens in the clear beyond loopback, and refuses a
plain http:// webhook URL at start with one line and exit status 2."""

from serverproc import Server, http_request, run_cli

SECRET = "whsec_" + "A" * 32


def warnings(server):
    return [line for line in server.stderr if " WARNING " in line]


def test_require_https_refuses_plain_http_and_forged_schemes(tmp_path):
    with Server(tmp_path / "data", "--host", "0.0.0.0", "--require-https", "true") as server:
        token = server.first_token
        for forged in ({}, {"X-Forwarded-Proto": "https"}, {"Forwarded": "proto=https"}):
            status, _, body = http_request("127.0.0.1", server.port, "POST", "/plants",
                                           {"id": 1, "name": "x"}, token, headers=forged)
            assert status == 403 and "HTTPS" in body["message"], body
        assert http_request("127.0.0.1", server.port, "GET", "/health")[0] == 200
        assert http_request("127.0.0.1", server.port, "GET", "/ready")[0] == 200
        server.stop()
    assert warnings(server) == []  # require_https: nothing to warn of


def test_serving_beyond_loopback_in_the_clear_is_one_warning_line(tmp_path):
    with Server(tmp_path / "a", "--host", "0.0.0.0") as server:
        server.stop()
    [line] = warnings(server)
    assert "0.0.0.0" in line and "bearer tokens" in line and "in the clear" in line
    with Server(tmp_path / "b") as server:  # loopback, the default
        server.stop()
    assert warnings(server) == []


def test_a_plain_http_webhook_url_is_one_warning_line_and_refused_with_require_https(
        tmp_path):
    urls = "http://hooks.example/new http://127.0.0.1:9/ https://b.example/"
    with Server(tmp_path / "a", "--webhook-urls", urls, "--webhook-secret", SECRET) as server:
        server.stop()
    [line] = warnings(server)
    assert "http://hooks.example/new" in line and "127.0.0.1:9" not in line
    assert "signatures travel in the clear" in line
    refused = run_cli("serve", "--port", "0", "--data-dir", str(tmp_path / "b"),
                      "--require-https", "true", "--webhook-urls", urls,
                      "--webhook-secret", SECRET)
    assert refused.returncode == 2
    [line] = refused.stderr.splitlines()
    assert line.startswith("plant-store: error: setting webhook_urls") and "require_https" in line
    assert not (tmp_path / "b").exists()  # refused before anything was made
