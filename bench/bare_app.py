"""The ceiling: a bare WSGI callable on waitress with the service's own server settings.

It reads the body and answers a fixed JSON Plant, so the difference between it and the
service is the service's own work per request. Prints the same "listening on" line as
``plant-store serve``.
"""

import sys

from plant_store.config import Config
from plant_store.server import create_server

ANSWER = b'{"name":"plant","tag":"bench"}'
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(ANSWER)))]


def application(environ, start_response):
    environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    start_response("200 OK", HEADERS)
    return [ANSWER]


if __name__ == "__main__":
    server = create_server(application, Config(port=0))
    print(f"bare listening on http://{server.effective_host}:{server.effective_port}",
          file=sys.stderr, flush=True)
    server.run()
