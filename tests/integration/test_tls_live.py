"""The real-server half of tests/unit/http/test_https.py: ``plant-store serve`` with
require_https refuses plain HTTP (forged forwarded headers or not) and keeps the probes
plain, warns in one line when it takes tokens in the clear beyond loopback, and refuses a
plain http:// webhook URL at start with one line and exit status 2."""

from support.servers import Server, http_request, run_cli

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


def test_granian_serves_https_directly_and_a_renewed_certificate_on_restart(tmp_path):
    """Issue 45: ``serve --server granian --tls-certificate --tls-key`` answers over HTTPS
    to a client that verifies the certificate, the service sees https (require_https
    passes, the Link says https), plain HTTP gets no answer, and a certificate renewed in
    place is served from the next start. Waitress refuses the settings in one line."""
    import http.client
    import shutil
    import socket
    import ssl
    import subprocess

    from support.proxies import OPENSSL, certificates

    pki = certificates()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copyfile(pki.cert, cert)
    shutil.copyfile(pki.key, key)
    tls = ("--server", "granian", "--tls-certificate", str(cert), "--tls-key", str(key),
           "--require-https", "true")

    def served_certificate(port):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                pki.context().wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            return sock.getpeercert(binary_form=True)

    with Server(tmp_path / "data", *tls) as server:
        assert server.url.startswith("https://127.0.0.1:")
        token = server.first_token
        for plant_id in (1, 2):
            status, _, body = http_request("127.0.0.1", server.port, "POST", "/plants",
                                           {"id": plant_id, "name": "Fern"}, token,
                                           context=pki.context())
            assert (status, body) == (200, {"name": "Fern"})
        status, headers, _ = http_request("127.0.0.1", server.port, "GET", "/plants?limit=1",
                                          token=token, context=pki.context())
        assert status == 200 and headers["Link"].startswith("<https://127.0.0.1:")
        try:
            answer = http_request("127.0.0.1", server.port, "GET", "/plants", token=token,
                                  timeout=3)
        except (OSError, http.client.HTTPException) as exc:  # a TLS alert, not HTTP
            answer = type(exc).__name__
        assert not (isinstance(answer, tuple) and answer[0] == 200), answer
        first = served_certificate(server.port)
    # Renewed in place: a new certificate from the same CA over the same path.
    subprocess.run([OPENSSL, "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey",
                    "ca.key", "-CAcreateserial", "-days", "2", "-extfile", "tls.ext", "-out",
                    str(cert)], cwd=pki.dir, check=True, capture_output=True)
    with Server(tmp_path / "data", *tls) as server:
        renewed = served_certificate(server.port)
        assert renewed != first and renewed == ssl.PEM_cert_to_DER_cert(cert.read_text())
    refused = run_cli("serve", "--port", "0", "--data-dir", str(tmp_path / "w"),
                      "--tls-certificate", str(cert), "--tls-key", str(key))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "waitress serves no TLS" in refused.stderr
