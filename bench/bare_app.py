"""The ceiling: a bare WSGI callable on waitress with the service's own server settings.

It reads the body and answers a fixed JSON Plant, so the difference between it and the
service is the service's own work per request. Prints the same "listening on" line as
``plant-store serve``, and takes the same PLANT_STORE_* variables. With
BARE_WAITRESS_DEFAULTS=1 it runs on waitress as it comes instead (16 threads, nothing else
set): "bare waitress" in the plain sense.
"""

import os
import sys

import waitress

from plant_store import config
from plant_store.serving.server import create_server

ANSWER = b'{"name":"plant","tag":"bench"}'
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(ANSWER)))]


def application(environ, start_response):
    environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    start_response("200 OK", HEADERS)
    return [ANSWER]


if __name__ == "__main__":
    if os.environ.get("BARE_WAITRESS_DEFAULTS"):
        server = waitress.create_server(application, host="127.0.0.1", port=0, threads=16)
    else:  # the service's settings, PLANT_STORE_* variables included, so both servers match
        server = create_server(application, config.load(None, os.environ, {"port": "0"}))
    print(f"bare listening on http://{server.effective_host}:{server.effective_port}",
          file=sys.stderr, flush=True)
    server.run()
