"""The real-server half of tests/unit/util/test_forwarded.py: forwarded headers and the URL
prefix, applied around the app (plant_store.util.forwarded) under gunicorn and uWSGI."""

import time

import pytest

from support.addresses import CLIENT
from support.prefork import gunicorn, uwsgi
from support.servers import http_request


@pytest.mark.parametrize("server", ["gunicorn", "uwsgi"])
def test_other_servers_apply_the_prefix_and_the_proxy(tmp_path, server):
    """Before the app applied them itself, both answered 404 under /api and ignored the headers
    (url_prefix and trusted_proxy were waitress's arguments, for 'plant-store serve' only)."""
    settings = {"PLANT_STORE_URL_PREFIX": "/api", "PLANT_STORE_TRUSTED_PROXY": "127.0.0.1",
                "PLANT_STORE_LOG_LEVEL": "info"}
    start = gunicorn if server == "gunicorn" else uwsgi
    with start(tmp_path, env=settings) as running:
        forwarded = {"X-Forwarded-For": CLIENT, "X-Forwarded-Host": "plants.example",
                     "X-Forwarded-Proto": "https", "X-Request-ID": "fw-1"}
        status, _, body = http_request(
            "127.0.0.1", running.port, "GET", "/api/openapi.json", headers=forwarded)
        assert status == 200
        assert body["servers"][0]["url"] == "https://plants.example/api"
        status, _, _ = http_request("127.0.0.1", running.port, "POST", "/api/plants",
                                    {"id": 1, "name": "Fern"}, running.token, forwarded)
        assert status == 200
        deadline = time.monotonic() + 10  # access lines are written in batches
        while not (lines := [line for line in running.output if "fw-1" in line]):
            assert time.monotonic() < deadline, "".join(running.output)
            time.sleep(0.05)
        assert f" {CLIENT} POST /api/plants 200 " in lines[0]


def test_gunicorn_believes_no_forwarded_scheme_the_service_does_not(tmp_path):
    """gunicorn's own defaults took X-Forwarded-Proto from any loopback peer as the scheme
    (and answered an HTML 400 to contradictory ones); with the hooks, only trusted_proxy
    decides."""
    with gunicorn(tmp_path, "-c", "python:plant_store.gunicorn_hooks") as running:
        for forged in ({"X-Forwarded-Proto": "https"},
                       {"X-Forwarded-Proto": "https", "X-Forwarded-Ssl": "off"}):
            status, _, body = http_request("127.0.0.1", running.port, "GET", "/",
                                           headers=forged)
            assert (status, body["plants"]) == (200, f"http://127.0.0.1:{running.port}/plants")


def test_uwsgi_takes_no_scheme_from_a_clients_x_forwarded_ssl(tmp_path):
    """Hostile pass: uWSGI itself set wsgi.url_scheme to https from X-Forwarded-Ssl: on."""
    with uwsgi(tmp_path) as running:
        status, _, body = http_request("127.0.0.1", running.port, "GET", "/",
                                       headers={"X-Forwarded-Ssl": "on"})
        assert (status, body["plants"]) == (200, f"http://127.0.0.1:{running.port}/plants")


def test_uwsgi_takes_no_scheme_from_a_clients_x_forwarded_proto(tmp_path):
    """Found by the TLS work (issue 45): uWSGI set wsgi.url_scheme to https from any peer's
    X-Forwarded-Proto, so require_https took a forged header for HTTPS; only a trusted
    proxy's word counts."""
    env = {"PLANT_STORE_REQUIRE_HTTPS": "true", "PLANT_STORE_TRUSTED_PROXY": "127.0.0.1"}
    with uwsgi(tmp_path, env=env) as running:
        forged = {"X-Forwarded-Proto": "https"}
        status, _, body = http_request("127.0.0.1", running.port, "POST", "/plants",
                                       {"id": 1, "name": "x"}, running.token, headers=forged,
                                       source="127.0.0.2")
        assert status == 403 and "HTTPS" in body["message"], body
        status, _, body = http_request("127.0.0.1", running.port, "GET", "/", headers=forged)
        assert (status, body["plants"]) == (200, f"https://127.0.0.1:{running.port}/plants")


def test_uwsgi_workers_contending_for_one_store_do_not_wait_lock_timeout(tmp_path):
    """Hostile pass: the second worker held its first client 10 s (lock_timeout) before
    its 503, waiting for a sibling that never lets go."""
    with uwsgi(tmp_path, "--master", "--processes", "2",
               env={"PLANT_STORE_LOCK_TIMEOUT": "10"}) as running:
        slowest = 0.0
        for _ in range(20):  # each on a new connection: both workers get some
            started = time.monotonic()
            http_request("127.0.0.1", running.port, "GET", "/plants", token=running.token)
            slowest = max(slowest, time.monotonic() - started)
        assert slowest < 5
