"""The composition root: the settings and what was opened for them in, a ready WSGI app
out (the ``falcon.App``, behind :class:`~plant_store.util.forwarded.ForwardedHeaders` when
a proxy or a prefix is set). It opens nothing (:class:`plant_store.service.Service` opens and
closes); it wires the middleware (:func:`plant_store.http.middleware.stack`), the
resources of each route (the table in :mod:`plant_store.http.operational`) and the error
serializer."""

from collections.abc import Callable, Iterable
from typing import TextIO

import falcon

from plant_store.config import Config, ConfigError
from plant_store.events import Fanout
from plant_store.http import errors, operational
from plant_store.http.auth import Tokens
from plant_store.http.middleware import access_log_of, stack
from plant_store.http.operational import (
    DocsAssetResource,
    DocsPageResource,
    HealthResource,
    IndexResource,
    MetricsResource,
    OpenApiResource,
    ReadyResource,
)
from plant_store.http.plants import PlantResource, PlantsResource
from plant_store.metrics import Metrics, NoMetrics
from plant_store.stores import Store
from plant_store.util.forwarded import ForwardedHeaders
from plant_store.webhooks.worker import NoWebhooks, WebhookWorker


def create_app(
    config: Config, *, store: Store, tokens: Tokens, metrics: Metrics | NoMetrics | None = None,
    webhooks: WebhookWorker | NoWebhooks | None = None, log_stream: TextIO | None = None,
) -> Callable[..., Iterable[bytes]]:
    """The service as a WSGI app, for any server or host application: the ``falcon.App``
    itself, or, when ``trusted_proxy`` or ``url_prefix`` is set, a
    :class:`~plant_store.util.forwarded.ForwardedHeaders` around it (the ``falcon.App`` is
    its ``.app``), which applies them before Falcon reads the request, under every server.

    ``store``: where plants live (the caller opened it, and closes it); ``tokens``: who may
    call the API (a :class:`~plant_store.tokens.TokenFile`,
    :class:`~plant_store.tokens.StaticTokens`, or anything with their ``verify``);
    ``metrics``: what counts the requests (:class:`~plant_store.metrics.NoMetrics` when
    none); ``webhooks``: the worker that delivers what creates owe to
    ``config.webhook_urls``, woken after each (required when they are set, as deliveries
    would otherwise wait unsent). The two hear the layers' events
    (:class:`~plant_store.events.Events`) as one. Access lines go to ``log_stream`` when
    given, else through the ``plant_store.access`` logger."""
    metrics = metrics if metrics is not None else NoMetrics()
    webhooks = webhooks if webhooks is not None else NoWebhooks()
    if config.webhook_urls and isinstance(webhooks, NoWebhooks):
        raise ConfigError("create_app: webhook_urls is set but no worker delivers: pass "
                          "webhooks=plant_store.webhooks.start(config, store) (and stop it "
                          "when done), or the deliveries would wait in the outbox unsent")
    events = Fanout(metrics, webhooks)
    middleware = stack(config, tokens, events, log_stream=log_stream,
                       count_each=metrics.in_files)
    if isinstance(metrics, Metrics):  # a scrape counts the requests not yet handed on
        metrics.drain_before_scrape(access_log_of(middleware).drain)
    app = falcon.App(middleware=middleware)
    # Falcon's default already; said here, as the plant resources rely on it for their
    # answers' Content-Type rather than setting it on each.
    app.resp_options.default_media_type = falcon.MEDIA_JSON
    app.set_error_serializer(errors.serialize)
    app.add_error_handler(Exception, errors.unexpected)
    resources: dict[str, object] = {
        operational.PLANTS: PlantsResource(
            store, config.max_body_size, config.page_size, config.max_page_size,
            webhooks=config.webhook_urls, events=events),
        operational.PLANT: PlantResource(store, config.max_body_size, events),
        operational.INDEX: IndexResource(docs=operational.INSTALLED),
        operational.HEALTH: HealthResource(),
        operational.READY: ReadyResource(store, getattr(tokens, "problem", lambda: None)),
        operational.OPENAPI: OpenApiResource(),
        operational.DOCS: DocsPageResource(),
        operational.DOCS_ASSET: DocsAssetResource(),
    }
    if isinstance(metrics, Metrics):
        resources[operational.METRICS] = MetricsResource(metrics.exposition, metrics.content_type)
    for template in operational.ROUTES:  # in the table's order
        if template in resources:
            app.add_route(template, resources[template])
    if config.trusted_proxy or config.url_prefix:
        return ForwardedHeaders(app, config.trusted_proxy, config.trusted_proxy_headers.split(),
                                config.trusted_proxy_count, config.url_prefix)
    return app  # nothing to rewrite: the plain app, not a call more per request
