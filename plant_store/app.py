"""The composition root: config in, a ready ``falcon.App`` out."""

from typing import TextIO

import falcon

from plant_store import errors
from plant_store.access_log import AccessLog
from plant_store.auth import BearerAuth
from plant_store.config import Config
from plant_store.docs_page import DocsAssetResource, DocsPageResource
from plant_store.operational import HealthResource, OpenApiResource
from plant_store.plants import PlantResource, PlantsResource
from plant_store.stores import Store, open_store
from plant_store.tokens import TokenFile
from plant_store.webhooks import WebhookWorker

# Probes, the document and its page: no token, and their access lines only at debug, so
# probes do not flood the log. Under the prefixes, every path is public (the page's assets,
# and a 404 for any other name there).
PUBLIC_PATHS = frozenset({"/health", "/openapi.json", "/docs"})
PUBLIC_PREFIXES = ("/docs/",)


def create_app(
    config: Config, *, store: Store | None = None, tokens: TokenFile | None = None,
    log_stream: TextIO | None = None, webhooks: WebhookWorker | None = None,
) -> falcon.App:
    """Build the service; the caller that passes ``store`` owns it and closes it.
    Access lines go to ``log_stream``, or to whatever ``sys.stderr`` is when they are written.
    Creates owe deliveries to ``config.webhook_urls``; ``webhooks``, when given, is woken
    after each one (without it they wait in the outbox for whichever worker runs)."""
    store = store if store is not None else open_store(config)
    tokens = tokens if tokens is not None else TokenFile(config.token_file)
    access_log = AccessLog(log_stream, config.log_level,
                           quiet_paths=PUBLIC_PATHS, quiet_prefixes=PUBLIC_PREFIXES,
                           log_format=config.log_format)
    app = falcon.App(middleware=[
        access_log, BearerAuth(tokens, PUBLIC_PATHS, PUBLIC_PREFIXES)])
    app.set_error_serializer(errors.serialize)
    app.add_error_handler(Exception, errors.unexpected)
    app.add_route("/plants", PlantsResource(
        store, config.max_body_size, config.page_size, config.max_page_size,
        webhooks=config.webhook_urls, on_created=webhooks.wake if webhooks else None))
    app.add_route("/plants/{plant_id}", PlantResource(store))
    app.add_route("/health", HealthResource(store))
    app.add_route("/openapi.json", OpenApiResource())
    app.add_route("/docs", DocsPageResource())
    app.add_route("/docs/{name}", DocsAssetResource())
    return app
