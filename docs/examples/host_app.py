"""Plant Store inside your own WSGI application, mounted at ``/plant-store``.

Run it with any WSGI server, e.g. ``PLANTS_TOKEN=s3cret waitress-serve host_app:application``.
The host owns what the service is made of: the store (opened here, closed by ``close``), the
webhook worker, the tokens, and logging: every line of the service, its access lines
included, goes through the host's handlers.
"""

import logging
import os

from werkzeug.middleware.dispatcher import DispatcherMiddleware

from plant_store.config import Config
from plant_store.service import Service
from plant_store.tokens import StaticTokens

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

# The store, the metrics, the webhook worker (when webhook_urls are set) and the app.
plants = Service(Config(data_dir=os.environ.get("PLANTS_DATA", "plants-data")),
                 tokens=StaticTokens({os.environ["PLANTS_TOKEN"]: "host"}))


def host(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"the host application\n"]


application = DispatcherMiddleware(host, {"/plant-store": plants.app})


def close():
    """At the host's shutdown: deliveries in flight end, then the store lets go."""
    plants.close()
