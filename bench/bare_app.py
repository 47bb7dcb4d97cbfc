"""The ceiling: a bare WSGI callable on waitress with the service's own server settings;
and the Falcon floor (``falcon_floor``): the thinnest Falcon service, one resource whose
``on_post`` reads the body and answers the same fixed JSON, no middleware.

Each reads the body and answers a fixed JSON Plant, so the difference between them and the
service is the service's own work per request. Prints the same "listening on" line as
``plant-store serve``, and takes the same PLANT_STORE_* variables. With BARE_APP=falcon it
serves the Falcon floor. With BARE_WAITRESS_DEFAULTS=1 it runs on waitress as it comes
instead (16 threads, nothing else set): "bare waitress" in the plain sense.
"""

import os
import sys

import falcon
import waitress

from plant_store import config
from plant_store.serving.server import create_server

ANSWER = b'{"name":"plant","tag":"bench"}'
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(ANSWER)))]


def application(environ, start_response):
    environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    start_response("200 OK", HEADERS)
    return [ANSWER]


class _Floor:
    def on_post(self, req, resp):
        req.bounded_stream.read()
        resp.data = ANSWER


def falcon_floor():
    """The Falcon floor: any Falcon service's own cost, a create's read and fixed answer."""
    app = falcon.App()
    app.resp_options.default_media_type = falcon.MEDIA_JSON
    app.add_route("/plants", _Floor())
    return app


if __name__ == "__main__":
    if os.environ.get("BARE_APP") == "falcon":
        application = falcon_floor()
    if os.environ.get("BARE_WAITRESS_DEFAULTS"):
        server = waitress.create_server(application, host="127.0.0.1", port=0, threads=16)
    else:  # the service's settings, PLANT_STORE_* variables included, so both servers match
        server = create_server(application, config.load(None, os.environ, {"port": "0"}))
    print(f"bare listening on http://{server.effective_host}:{server.effective_port}",
          file=sys.stderr, flush=True)
    server.run()
