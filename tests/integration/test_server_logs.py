"""Logging under other WSGI servers: configured by the entry point and gunicorn's hooks, in
one format, levels respected (before, gunicorn printed the service's warnings bare, through
Python's last-resort handler, and dropped its INFO lines)."""

import json
import time

from support.prefork import gunicorn, uwsgi
from support.servers import http_request


def wait_for(server, text, timeout=10):
    deadline = time.monotonic() + timeout
    while not any(text in line for line in server.output):
        assert time.monotonic() < deadline, "".join(server.output)
        time.sleep(0.05)


def test_gunicorn_writes_every_line_as_json(tmp_path):
    with gunicorn(tmp_path, "-c", "python:plant_store.gunicorn_hooks",
                  env={"PLANT_STORE_LOG_FORMAT": "json", "PLANT_STORE_LOG_LEVEL": "info"}
                  ) as server:
        http_request("127.0.0.1", server.port, "GET", "/plants", token=server.token,
                     headers={"X-Request-ID": "json-1"})
        wait_for(server, "json-1")
        server.stop()
    lines = [json.loads(line) for line in server.output]  # each line is one JSON object
    by_logger = {line["logger"] for line in lines}
    assert {"gunicorn.error", "plant_store.access"} <= by_logger
    access = next(line for line in lines if line.get("request_id") == "json-1")
    assert (access["level"], access["path"], access["status"]) == ("INFO", "/plants", 200)


def test_uwsgi_gets_the_services_format_and_levels(tmp_path):
    with uwsgi(tmp_path, env={"PLANT_STORE_LOG_LEVEL": "info"}) as server:
        http_request("127.0.0.1", server.port, "GET", "/plants", token=server.token,
                     headers={"X-Request-ID": "text-1"})
        wait_for(server, "text-1")
    line = next(line for line in server.output if "text-1" in line)
    assert " INFO [plant_store.access] 127.0.0.1 GET /plants 200 " in line


def test_a_server_without_tokens_says_how_to_make_one(tmp_path):
    with gunicorn(tmp_path, env={"PLANT_STORE_LOG_LEVEL": "warning"}) as server:
        (tmp_path / "data" / "tokens.json").unlink()
        server.token = None
        assert http_request("127.0.0.1", server.port, "GET", "/plants")[0] == 401
        wait_for(server, "plant-store token add --token-file")
    line = next(line for line in server.output if "no tokens" in line)
    assert " WARNING [plant_store.lazy_app] no tokens in " in line
