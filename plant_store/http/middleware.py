"""The middleware of the app, in order, as the settings ask for it: one function, so the
order a request meets them in is written once (:func:`stack`).

A request meets: CORS (first, so its headers reach every answer, 401s too), the access
line and request id, the HTTPS check (before the token: plain HTTP is refused unread), the
token check, the rate limit (after the token check, which names the client's token)."""

from typing import Any, TextIO

import falcon

from plant_store.config import Config
from plant_store.events import Events
from plant_store.http.access_log import AccessLog
from plant_store.http.auth import BearerAuth, Tokens
from plant_store.http.https import RequireHttps
from plant_store.http.rate_limit import Buckets, RateLimit
from plant_store.http.routes import DOCS, HEALTH, INDEX, METRICS, OPENAPI, READY

# Probes, the document and its page: no token, and their access lines only at debug, so
# probes do not flood the log. Under the prefixes, every path is public (the page's assets,
# and a 404 for any other name there). /metrics is as quiet, and public only when the
# setting says so.
PUBLIC_PATHS = frozenset({INDEX, HEALTH, READY, OPENAPI, DOCS})
PUBLIC_PREFIXES = (DOCS + "/",)
QUIET_PATHS = PUBLIC_PATHS | {METRICS}
# What a cross-origin page may read beyond the safe headers: the next page, the request
# id, why a request was refused or should wait, and a plant's ETag (for its If-Match).
CORS_EXPOSED = ("Link", "X-Request-ID", "WWW-Authenticate", "Retry-After", "ETag")


def stack(config: Config, tokens: Tokens, events: Events, *,
          log_stream: TextIO | None = None) -> list[Any]:
    """The middleware, in order, telling ``events`` of each answer (``request``), the
    access lines dropped (``dropped``) and each 401 (``refused``)."""
    public = PUBLIC_PATHS | ({METRICS} if config.metrics == "public" else set())
    middleware: list[Any] = [  # falcon's middleware protocols
        AccessLog(log_stream, config.log_level, quiet_paths=QUIET_PATHS,
                  quiet_prefixes=PUBLIC_PREFIXES, log_format=config.log_format,
                  on_response=events.request, on_dropped=events.dropped),
        BearerAuth(tokens, public, PUBLIC_PREFIXES, preflight=bool(config.cors_allow_origins),
                   on_refused=events.refused)]
    if config.require_https:
        middleware.insert(1, RequireHttps())
    if config.rate_limit:
        middleware.append(RateLimit(Buckets(config.rate_limit, config.rate_limit_burst)))
    if config.cors_allow_origins:
        origins = config.cors_allow_origins
        middleware.insert(0, _CORS(
            allow_origins="*" if "*" in origins else origins, expose_headers=CORS_EXPOSED))
    return middleware


class _CORS(falcon.CORSMiddleware[Any, Any]):
    """Falcon's CORS, plus ``Vary: Origin`` when the answer depends on the origin (a list of
    them, not ``*``), so that a shared cache never gives one origin's answer to another."""

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: object,
                         req_succeeded: bool) -> None:
        super().process_response(req, resp, resource, req_succeeded)
        if self.allow_origins != "*":
            resp.append_header("Vary", "Origin")
