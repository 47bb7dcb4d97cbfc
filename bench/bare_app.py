"""The ceiling: a bare WSGI callable on waitress with the service's own server settings;
and the Falcon floor (``falcon_floor``): the thinnest Falcon service, one resource whose
``on_post`` reads the body and answers the same fixed JSON, no middleware.

Each reads the body and answers a fixed JSON Plant, so the difference between them and the
service is the service's own work per request. Prints the same "listening on" line as
``plant-store serve``, and takes the same PLANT_STORE_* variables. With BARE_APP=falcon it
serves the Falcon floor, with BARE_APP=durable the durable floor. With
BARE_WAITRESS_DEFAULTS=1 it runs on waitress as it comes instead (16 threads, nothing else
set): "bare waitress" in the plain sense.
"""

import atexit
import os
import sys
import tempfile
import threading

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


class _DurableFloor:
    """The Falcon floor made durable the simplest way: each body appended to a file, and
    the answer given once an fsync covering it ends; whoever finds no fsync running writes
    and fsyncs every body waiting, the rest wait on one condition (a group commit with
    nothing else: no index, no rollback, no checks)."""

    def __init__(self):
        self._fd, path = tempfile.mkstemp(prefix="durable-floor-")
        atexit.register(os.unlink, path)
        self._cond = threading.Condition()
        self._waiting = []  # bodies not yet written
        self._syncing = False
        self._synced = 0  # groups made durable
        self.groups = 0

    def on_post(self, req, resp):
        body = req.bounded_stream.read()
        with self._cond:
            self._waiting.append(body)
            group = self.groups + 1  # the next fsync to start covers this body
            while self._synced < group:
                if self._syncing:
                    self._cond.wait()
                    continue
                self._syncing, data, self._waiting = True, b"\n".join(self._waiting), []
                self.groups += 1
                self._cond.release()
                try:
                    os.write(self._fd, data + b"\n")
                    os.fsync(self._fd)
                finally:
                    self._cond.acquire()
                    self._syncing = False
                    self._synced += 1
                    self._cond.notify_all()
        resp.data = ANSWER


def falcon_floor_durable():
    """The Falcon floor whose creates wait for a group fsync (:class:`_DurableFloor`): the
    ceiling of any store that fsyncs before it answers, on this server's threads."""
    app = falcon.App()
    app.resp_options.default_media_type = falcon.MEDIA_JSON
    app.add_route("/plants", _DurableFloor())
    return app


if __name__ == "__main__":
    if os.environ.get("BARE_APP") == "falcon":
        application = falcon_floor()
    elif os.environ.get("BARE_APP") == "durable":
        application = falcon_floor_durable()
    if os.environ.get("BARE_WAITRESS_DEFAULTS"):
        server = waitress.create_server(application, host="127.0.0.1", port=0, threads=16)
    else:  # the service's settings, PLANT_STORE_* variables included, so both servers match
        server = create_server(application, config.load(None, os.environ, {"port": "0"}))
    print(f"bare listening on http://{server.effective_host}:{server.effective_port}",
          file=sys.stderr, flush=True)
    server.run()
