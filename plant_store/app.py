"""The composition root: config in, a ready ``falcon.App`` out."""

from collections.abc import Callable, Iterable
from typing import Any, TextIO

import falcon
import falcon.routing

from plant_store import metrics
from plant_store.config import Config, ConfigError
from plant_store.http import docs_page, errors
from plant_store.http.access_log import AccessLog
from plant_store.http.auth import BearerAuth, Tokens
from plant_store.http.docs_page import DocsAssetResource, DocsPageResource
from plant_store.http.forwarded import Forwarded
from plant_store.http.https import RequireHttps
from plant_store.http.operational import (
    HealthResource,
    IndexResource,
    OpenApiResource,
    ReadyResource,
)
from plant_store.http.plants import PlantResource, PlantsResource
from plant_store.http.rate_limit import Buckets, RateLimit
from plant_store.stores import MemoryStore, Store, open_store
from plant_store.tokens import TokenFile
from plant_store.webhooks.worker import WebhookWorker

# Probes, the document and its page: no token, and their access lines only at debug, so
# probes do not flood the log. Under the prefixes, every path is public (the page's assets,
# and a 404 for any other name there). /metrics is as quiet, and public only when the
# setting says so.
PUBLIC_PATHS = frozenset({"/", "/health", "/ready", "/openapi.json", "/docs"})
PUBLIC_PREFIXES = ("/docs/",)
QUIET_PATHS = PUBLIC_PATHS | {"/metrics"}
# What a cross-origin page may read beyond the safe headers: the next page, the request
# id, why a request was refused or should wait, and a plant's ETag (for its If-Match).
CORS_EXPOSED = ("Link", "X-Request-ID", "WWW-Authenticate", "Retry-After", "ETag")


def create_app(
    config: Config, *, store: Store | None = None, tokens: Tokens | None = None,
    log_stream: TextIO | None = None, webhooks: WebhookWorker | None = None,
    counted: metrics.NoMetrics | None = None,
) -> falcon.App[falcon.Request, falcon.Response]:
    """Build the service: a WSGI app, for any server or host application.

    ``store``: where plants live; the caller that passes it owns it and closes it. Without it,
    the store ``config`` names is opened, but only when ``config`` names one (``store =
    memory``, a ``data_dir``, or PostgreSQL): a library never opens ``./plant-store-data``
    in whatever directory its host runs from. ``tokens``: who may call the API (a
    :class:`~plant_store.tokens.TokenFile`, :class:`~plant_store.tokens.StaticTokens`, or
    anything with their ``verify``); without it, the token file ``config`` names, under the
    same condition. ``webhooks``: the worker that delivers what creates owe to
    ``config.webhook_urls`` (:func:`plant_store.webhooks.worker.start`), woken after each; with
    webhook_urls set it is required, as deliveries would otherwise wait unsent.
    Access lines go to ``log_stream`` when given, else through the ``plant_store.access``
    logger (see :mod:`plant_store.http.access_log`). ``counted``: the metrics, when the caller
    made them to count its webhook worker's attempts too; else made here as
    ``config.metrics`` says."""
    _refuse_defaults(config, store, tokens, webhooks)
    if store is None:  # a memory store locks data_dir only when one was named
        unnamed = config.store == "memory" and "data_dir" not in config.given
        store = MemoryStore() if unnamed else open_store(config)
    tokens = tokens if tokens is not None else TokenFile(config.token_file)
    if counted is None:
        counted = metrics.for_config(config, store)
    public = PUBLIC_PATHS | ({"/metrics"} if config.metrics == "public" else set())
    access_log = AccessLog(log_stream, config.log_level, quiet_paths=QUIET_PATHS,
                           quiet_prefixes=PUBLIC_PREFIXES, log_format=config.log_format,
                           on_response=counted.request, on_dropped=counted.dropped)
    auth = BearerAuth(tokens, public, PUBLIC_PREFIXES,
                      preflight=bool(config.cors_allow_origins),
                      on_refused=counted.refused)
    middleware: list[Any] = [access_log, auth]  # falcon's middleware protocols
    if config.require_https:  # before the token check: plain HTTP is refused unread
        middleware.insert(1, RequireHttps())
    if config.rate_limit:  # after the token check, which names the client's token
        middleware.append(RateLimit(Buckets(config.rate_limit, config.rate_limit_burst)))
    if config.cors_allow_origins:  # first, so its headers reach every answer, 401s too
        origins = config.cors_allow_origins
        middleware.insert(0, _CORS(
            allow_origins="*" if "*" in origins else origins, expose_headers=CORS_EXPOSED))
    router = falcon.routing.CompiledRouter()
    if config.trusted_proxy or config.url_prefix:
        app: falcon.App[falcon.Request, falcon.Response] = _ForwardedApp(Forwarded(
            config.trusted_proxy, config.trusted_proxy_headers.split(),
            config.trusted_proxy_count, config.url_prefix), middleware=middleware, router=router)
    else:  # nothing to rewrite: the plain app, not a call more per request
        app = falcon.App(middleware=middleware, router=router)
    # Falcon's default already; said here, as the plant resources rely on it for their
    # answers' Content-Type rather than setting it on each.
    app.resp_options.default_media_type = falcon.MEDIA_JSON
    app.set_error_serializer(errors.serialize)
    app.add_error_handler(Exception, errors.unexpected)
    app.add_route("/plants", PlantsResource(
        store, config.max_body_size, config.page_size, config.max_page_size,
        webhooks=config.webhook_urls, on_created=webhooks.wake if webhooks else None,
        on_unavailable=counted.unavailable))
    app.add_route("/plants/{plant_id}", PlantResource(store, config.max_body_size,
                                                      counted.unavailable))
    app.add_route("/", IndexResource(docs=docs_page.INSTALLED))
    app.add_route("/health", HealthResource())
    app.add_route("/ready", ReadyResource(store))
    app.add_route("/openapi.json", OpenApiResource())
    app.add_route("/docs", DocsPageResource())
    app.add_route("/docs/{name}", DocsAssetResource())
    counted.router = router
    if isinstance(counted, metrics.Metrics):
        app.add_route("/metrics", metrics.MetricsResource(counted))
    return app


def _refuse_defaults(config: Config, store: Store | None, tokens: Tokens | None,
                     webhooks: WebhookWorker | None) -> None:
    """The traps of building the app with what a command line would default to, each
    refused in one line that says what to pass."""
    named_dir = bool(config.given & {"data_dir", "token_file"})
    if store is None and config.store == "jsonfile" and "data_dir" not in config.given:
        raise ConfigError("create_app: pass store= or name a data_dir (or store = memory); "
                          "it opens no ./plant-store-data in the current directory unasked")
    if tokens is None and not named_dir:
        raise ConfigError("create_app: pass tokens= (plant_store.tokens.StaticTokens(["
                          "'...']) or TokenFile(path)) or name a token_file or data_dir")
    if config.webhook_urls and webhooks is None:
        raise ConfigError("create_app: webhook_urls is set but no worker delivers: pass "
                          "webhooks=plant_store.webhooks.start(config, store) (and stop it "
                          "when done), or the deliveries would wait in the outbox unsent")


class _ForwardedApp(falcon.App[falcon.Request, falcon.Response]):
    """The app behind :class:`~plant_store.http.forwarded.Forwarded`: what a trusted proxy says of
    the client, and the URL prefix, applied by the app itself, so every WSGI server and host
    application serves the same paths and URLs."""

    def __init__(self, forwarded: Forwarded, **options: Any) -> None:
        super().__init__(**options)
        self._forwarded = forwarded

    def __call__(self, env: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        self._forwarded(env)
        return super().__call__(env, start_response)


class _CORS(falcon.CORSMiddleware[Any, Any]):
    """Falcon's CORS, plus ``Vary: Origin`` when the answer depends on the origin (a list of
    them, not ``*``), so that a shared cache never gives one origin's answer to another."""

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: object,
                         req_succeeded: bool) -> None:
        super().process_response(req, resp, resource, req_succeeded)
        if self.allow_origins != "*":
            resp.append_header("Vary", "Origin")
