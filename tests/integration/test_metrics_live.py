"""The real-server half of tests/unit/metrics/test_metrics.py: ``/metrics``: a real scrape of a real
server, parsed with the Prometheus client's own text parser, counts exactly what was sent; who
may read it is a setting; gunicorn's workers on one PostgreSQL database add up in one scrape."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from plant_store.tokens import TokenFile
from plant_store.webhooks.worker import new_secret
from support import mounts
from support.metrics import own_subdirectory, samples, scrape, value
from support.receiver import Receiver
from support.servers import (
    Server,
    ended,
    exchange,
    free_port,
    http_request,
    run_cli,
    wait_answering,
)

SCRAPE_COPY = os.environ.get("PLANT_STORE_KEEP_SCRAPE")  # a path: keep the scrape there


def test_a_scrape_after_a_mixed_load_counts_what_was_sent(tmp_path):
    with Server(tmp_path) as server:
        token = server.first_token
        for i in range(5):
            assert server.request("POST", "/plants", {"id": i, "name": f"p{i}"}, token)[0] == 200
        assert server.request("POST", "/plants", {"id": 0, "name": "other"}, token)[0] == 409
        assert server.request("POST", "/plants", {"id": 9, "name": "x"})[0] == 401
        assert server.request("GET", "/plants", token="not-a-token")[0] == 401
        for _ in range(3):
            assert server.request("GET", "/plants", token=token)[0] == 200
        for i in range(2):
            assert server.request("DELETE", f"/plants/{i}", token=token)[0] == 204
        assert server.request("DELETE", "/plants/77", token=token)[0] == 404
        assert server.request("GET", "/nowhere", token=token)[0] == 404
        text = scrape(server.request, token)
    if SCRAPE_COPY:
        with open(SCRAPE_COPY, "w") as fh:
            fh.write(text)
    got = samples(text)
    requests = "plant_store_http_requests_total"
    assert value(got, requests, route="/plants", method="POST", status="200") == 5
    assert value(got, requests, route="/plants", method="POST", status="409") == 1
    # Refused before routing, and still named by their route, not their path.
    assert value(got, requests, route="/plants", method="POST", status="401") == 1
    assert value(got, requests, route="/plants", method="GET", status="401") == 1
    assert value(got, requests, route="/plants", method="GET", status="200") == 3
    assert value(got, requests, route="/plants/{plant_id}", method="DELETE", status="204") == 2
    assert value(got, requests, route="/plants/{plant_id}", method="DELETE", status="404") == 1
    assert value(got, requests, route="unmatched", method="GET", status="404") == 1
    assert not any("/plants/0" in str(key) or "/nowhere" in str(key) for key in got)
    latency = "plant_store_http_request_duration_seconds_count"
    assert value(got, latency, route="/plants", method="POST") == 7
    refused = "plant_store_tokens_refused_total"
    assert value(got, refused, reason="missing") == 1
    assert value(got, refused, reason="invalid") == 1
    assert value(got, refused, reason="scheme") == 0
    # 5 creates and 2 deletes were written; group commit may have shared fsyncs.
    writes = value(got, "plant_store_store_write_duration_seconds_count")
    assert 1 <= writes <= 7
    assert value(got, "plant_store_webhook_deliveries_owed") == 0
    assert value(got, "plant_store_webhook_deliveries_dead") == 0
    assert sum(v for (name, _), v in got.items()
               if name == "plant_store_store_unavailable_total") == 0


@pytest.mark.parametrize(("setting", "without", "with_token"), [
    ("token", 401, 200), ("public", 200, 200), ("off", 401, 404)])
def test_who_may_read_the_metrics_is_a_setting(tmp_path, setting, without, with_token):
    with Server(tmp_path, "--metrics", setting) as server:
        token = server.first_token
        status, headers, body = server.request("GET", "/metrics")
        assert status == without
        if without == 401:
            assert body["error"] == 401 and "Bearer" in headers["WWW-Authenticate"]
        assert server.request("GET", "/metrics", token=token)[0] == with_token


def test_webhook_attempts_by_outcome_and_the_outbox_gauges(tmp_path):
    good, bad = Receiver(answers=[500]), Receiver(then=500)
    with good, bad, Server(tmp_path, "--webhook-urls", f"{good.url} {bad.url}",
                           "--webhook-secret", new_secret(), "--webhook-backoff", "0.05",
                           "--webhook-max-attempts", "2") as server:
        token = server.first_token
        assert server.request("POST", "/plants", {"id": 1, "name": "a"}, token)[0] == 200
        good.wait_for(1)
        deadline = time.monotonic() + 15
        while True:
            got = samples(scrape(server.request, token))
            if value(got, "plant_store_webhook_deliveries_dead") == 1 or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.1)
    attempts = "plant_store_webhook_attempts_total"
    assert value(got, attempts, outcome="delivered") == 1
    assert value(got, attempts, outcome="failed") == 2  # good's first, bad's first
    assert value(got, attempts, outcome="dead") == 1  # bad's second and last
    assert value(got, "plant_store_webhook_deliveries_owed") == 0
    assert value(got, "plant_store_webhook_deliveries_dead") == 1


@pytest.mark.slow
def test_gunicorn_workers_on_postgresql_add_up_in_one_scrape(tmp_path, database_url):
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "counter_1.db").write_bytes(b"left by an earlier run")
    token_file = str(tmp_path / "tokens.json")
    token = TokenFile(token_file).add("t")
    port = free_port()
    env = {**os.environ, "PLANT_STORE_STORE": "postgresql",
           "PLANT_STORE_DATABASE_URL": database_url, "PLANT_STORE_TOKEN_FILE": token_file,
           "PLANT_STORE_DATA_DIR": str(tmp_path / "d"), "PLANT_STORE_LOG_LEVEL": "warning",
           "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    gunicorn = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "python:plant_store.gunicorn_hooks",
         "-w", "3", "-b", f"127.0.0.1:{port}", "plant_store.wsgi:application"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_answering(port, gunicorn)
        # Every worker answers a first request of its own before the counted ones: the
        # ready probes above were served too, and are counted apart.
        creates = []

        def client(n):
            for i in range(20):
                creates.append(http_request("127.0.0.1", port, "POST", "/plants",
                                            {"id": 100 * n + i, "name": "w"}, token)[0])

        clients = [threading.Thread(target=client, args=(n,)) for n in range(6)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(60)
        assert creates == [200] * 120
        counted_in = own_subdirectory(metrics_dir)
        pids = {name.split("_")[-1] for name in os.listdir(counted_in) if name.endswith(".db")}
        assert len(pids) >= 2, f"one worker took every request: {os.listdir(counted_in)}"
        got = samples(scrape(lambda *a, **k: http_request("127.0.0.1", port, *a, **k), token))
        assert value(got, "plant_store_http_requests_total",
                     route="/plants", method="POST", status="200") == 120
        assert value(got, "plant_store_store_write_duration_seconds_count") == 120
    finally:
        gunicorn.send_signal(signal.SIGTERM)
        ended(gunicorn)
        gunicorn.stderr.close()
    # Not the service's: neither counted nor removed; its own subdirectory gone at exit.
    assert os.listdir(metrics_dir) == ["counter_1.db"]


@pytest.mark.slow
def test_recycled_gunicorn_workers_leave_a_bounded_directory_and_their_counts(
        tmp_path, database_url):
    """``--max-requests`` ends a worker every 20 requests: its files are merged into the
    dead workers' archive, so the directory holds a few files plus two per live worker, and
    the totals still count every request the ended workers answered."""
    count = 200  # ten workers ended, each merged into the archive
    metrics_dir = tmp_path / "metrics"
    token_file = str(tmp_path / "tokens.json")
    token = TokenFile(token_file).add("t")
    port = free_port()
    env = {**os.environ, "PLANT_STORE_STORE": "postgresql",
           "PLANT_STORE_DATABASE_URL": database_url, "PLANT_STORE_TOKEN_FILE": token_file,
           "PLANT_STORE_DATA_DIR": str(tmp_path / "d"), "PLANT_STORE_LOG_LEVEL": "warning",
           "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    gunicorn = subprocess.Popen(  # on PostgreSQL, so that both workers serve and count
        [sys.executable, "-m", "gunicorn", "-c", "python:plant_store.gunicorn_hooks",
         "--preload", "-w", "2", "--max-requests", "20", "-b", f"127.0.0.1:{port}",
         "plant_store.wsgi:application"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_answering(port, gunicorn)
        counted_in = own_subdirectory(metrics_dir)
        most = 0
        for _ in range(count):
            assert http_request("127.0.0.1", port, "GET", "/plants", token=token)[0] == 200
            most = max(most, len(os.listdir(counted_in)))
        # Two files per live worker, the archive's two, its lock and the subdirectory's
        # marker; while a merge runs, also the ended worker's two and the archive's next
        # two (was: 2 per worker that ever ran, 40 more here).
        assert most <= 2 * 2 + 4 + 4, most
        settled = time.monotonic() + 5  # the last request's worker may be ending now
        while True:
            left = sorted(os.listdir(counted_in))
            pids = {name.split("_")[1][:-3] for name in left if name.endswith(".db")}
            pids.discard("dead")
            if len(pids) <= 2 and len(left) == 2 * len(pids) + 4:
                break
            assert time.monotonic() < settled, left
            time.sleep(0.05)
        got = samples(scrape(lambda *a, **k: http_request("127.0.0.1", port, *a, **k), token))
        assert value(got, "plant_store_http_requests_total",
                     route="/plants", method="GET", status="200") == count
        assert value(got, "plant_store_http_request_duration_seconds_count",
                     route="/plants", method="GET") == count
    finally:
        gunicorn.send_signal(signal.SIGTERM)
        ended(gunicorn)
        gunicorn.stderr.close()


@pytest.mark.slow
@pytest.mark.parametrize("named", [False, True])
def test_granian_workers_on_postgresql_add_up_in_one_scrape(tmp_path, database_url, named):
    """``serve --server granian --workers 2``: creates spread over both workers (a fresh
    connection each), and a scrape from a fresh connection, whichever worker answers it,
    counts every one. The master counts in a subdirectory of its own, made in
    PROMETHEUS_MULTIPROC_DIR or the temporary directory and removed at its stop; nothing
    else there is touched."""
    metrics_dir, temp = tmp_path / "metrics", tmp_path / "tmp"
    metrics_dir.mkdir()
    temp.mkdir()
    (metrics_dir / "counter_1.db").write_bytes(b"left by an earlier run")
    env = {"TMPDIR": str(temp)}  # where the master makes one
    if named:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    count, clients = 120, 6
    with Server(tmp_path / "d", "--server", "granian", "--workers", "2", "--store",
                "postgresql", "--database-url", database_url, env=env) as server:
        token = server.first_token
        creates, workers = [], set()

        def client(n):
            for i in range(count // clients):
                status, headers, _ = server.request("POST", "/plants",
                                                    {"id": 1000 * n + i, "name": "w"}, token)
                creates.append(status)
                workers.add(headers["X-Request-ID"].rsplit("-", 1)[0])

        threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert creates == [200] * count
        assert len(workers) == 2, "one worker took every create"
        answered_by = set()
        for _ in range(20):  # each on a fresh connection: either worker answers
            status, headers, text = server.request("GET", "/metrics", token=token)
            assert status == 200
            answered_by.add(headers["X-Request-ID"].rsplit("-", 1)[0])
            got = samples(text.decode())
            assert value(got, "plant_store_http_requests_total",
                         route="/plants", method="POST", status="200") == count
            writes = value(got, "plant_store_store_write_duration_seconds_count")
            assert 0 < writes <= count  # concurrent creates may share a statement
        assert len(answered_by) == 2, "one worker answered every scrape"
        own_subdirectory(metrics_dir if named else temp)
        assert list((temp if named else metrics_dir).glob("plant-store-*")) == []
    assert server.proc.returncode == 0
    assert list(temp.iterdir()) == []  # made by the master: removed at exit
    assert os.listdir(metrics_dir) == ["counter_1.db"]  # not this server's: neither counted
    # nor removed


def test_gunicorn_refuses_a_metrics_directory_its_workers_could_not_write(tmp_path):
    """A full file system would kill workers by SIGBUS mid-request; a read-only one would
    drop every request: both are refused at start, in one line."""
    for options, says in (("size=64k", "MiB free; the workers' metrics need at least 64 MiB"),
                          ("size=1m,ro", "Read-only file system")):
        with mounts.tmpfs(tmp_path / "m", options.split(",")[0].split("=")[1]) as small:
            if options.endswith(",ro"):
                mounts.remount(small, "ro")
            result = subprocess.run(
                [sys.executable, "-m", "gunicorn", "-c", "python:plant_store.gunicorn_hooks",
                 "-b", f"127.0.0.1:{free_port()}", "plant_store.wsgi:application"],
                env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(small),
                     "PLANT_STORE_STORE": "memory", "PLANT_STORE_DATA_DIR": str(tmp_path)},
                capture_output=True, text=True, timeout=30)
        assert result.returncode != 0
        assert f"plant-store: error: PROMETHEUS_MULTIPROC_DIR={small}: " in result.stderr
        assert says in result.stderr, result.stderr


def test_serve_refuses_a_multiprocess_directory_it_would_never_empty(tmp_path):
    result = run_cli("serve", "--store", "memory", "--data-dir", str(tmp_path),
                     env={"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)})
    assert result.returncode == 2
    assert "PROMETHEUS_MULTIPROC_DIR is set, but 'plant-store serve' is one process" in (
        result.stderr)


def test_requests_waitress_refuses_itself_are_counted_too(tmp_path):
    """A body over the limit, broken chunk framing, an unknown Transfer-Encoding: waitress
    answers them before the app, and the metrics still count them (not time them)."""
    with Server(tmp_path) as server:
        token = server.first_token
        head = (b"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                b"Content-Type: application/json\r\n" % token.encode())
        for raw, status in [
            (head + b"Content-Length: 70000\r\n\r\n", 413),
            (head + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
            (head + b"Transfer-Encoding: gzip\r\n\r\n", 501),
            (b"get / HTTP/1.1\r\nHost: x\r\n\r\n", 400),  # refused in its first line
        ]:
            assert exchange("127.0.0.1", server.port, raw).status == status
        scraped = samples(scrape(server.request, token))
    counts = {labels: count for (name, labels), count in scraped.items()
              if name == "plant_store_http_requests_total"}
    assert counts == {
        (("method", "POST"), ("route", "/plants"), ("status", "413")): 1.0,
        (("method", "POST"), ("route", "/plants"), ("status", "400")): 1.0,
        (("method", "POST"), ("route", "/plants"), ("status", "501")): 1.0,
        (("method", "OTHER"), ("route", "unmatched"), ("status", "400")): 1.0,
    }
