"""The real-server half of tests/unit/http/test_https.py: ``plant-store serve`` with
require_https refuses plain HTTP (forged forwarded headers or not) and keeps the probes
plain, warns in one line when it takes tokens in the clear beyond loopback, and refuses a
plain http:// webhook URL at start with one line and exit status 2."""

import os
import signal
import subprocess
import sys

import pytest

from support import bad_certificates
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


# What rustls sends to a plain-HTTP request on the TLS port, before it closes the
# connection (no reset): one TLS record, content type 21 (alert), record version 3.3,
# length 2, level 2 (fatal), description 50 (decode_error). curl shows these seven bytes
# as "Received HTTP/0.9 when not allowed".
FATAL_DECODE_ERROR = b"\x15\x03\x03\x00\x02\x02\x32"


def plain_http_answer(port, token):
    """Every byte a plain-HTTP request to ``port`` gets, up to the server's close."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /plants HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Authorization: Bearer " + token.encode() + b"\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    return answer


def test_granian_serves_https_directly_and_a_renewed_certificate_on_restart(tmp_path):
    """Issue 45: ``serve --server granian --tls-certificate --tls-key`` answers over HTTPS
    to a client that verifies the certificate, the service sees https (require_https
    passes, the Link says https), plain HTTP gets a TLS alert and a close, and a
    certificate renewed in place is served from the next start. Waitress refuses the
    settings in one line."""
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
        assert plain_http_answer(server.port, token) == FATAL_DECODE_ERROR
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


def start_on_granian(directory, cert, key, timeout=30):
    """``plant-store serve --server granian`` with the pair: (exit status, standard error
    lines), or (None, lines) when it was still serving after ``timeout`` s (then stopped,
    its workers with it)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "plant_store", "serve", "--server", "granian", "--port", "0",
         "--data-dir", str(directory / "data"), "--no-first-token",
         "--tls-certificate", str(cert), "--tls-key", str(key)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout)
        return proc.returncode, err.splitlines()
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        return None, err.splitlines()


@pytest.mark.parametrize("kind", sorted(bad_certificates.REFUSED))
def test_granian_refuses_each_bad_certificate_or_key_in_one_line(kind, tmp_path):
    """Issue 49, finding 8: a v1 certificate (and every other file rustls refuses) ended
    granian's worker with a Rust backtrace and exit status 1; an expired or not yet valid
    certificate was served. Each is now one line, naming the setting, and exit status 2."""
    cert, key = bad_certificates.make(kind, tmp_path / "pki")
    setting, said = bad_certificates.REFUSED[kind]
    status, lines = start_on_granian(tmp_path, cert, key)
    assert (status, len(lines)) == (2, 1), lines
    [line] = lines
    assert line.startswith(f"plant-store: error: setting {setting}=") and said in line, line


def test_granian_serves_but_warns_of_a_certificate_near_its_end_and_a_readable_key(tmp_path):
    cert, key = bad_certificates.make("expiring", tmp_path / "pki")
    key.chmod(0o644)
    with Server(tmp_path / "data", "--server", "granian", "--tls-certificate", str(cert),
                "--tls-key", str(key)) as server:
        server.stop()
    found = warnings(server)
    assert any(f"the TLS certificate {cert} expires on " in line and "in 3.0 days" in line
               for line in found), found
    assert any(f"the TLS key {key} may be read by its group and every user (mode 0644)"
               in line for line in found), found
