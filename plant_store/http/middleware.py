"""The middleware of the app, in order, as the settings ask for it: one function, so the
order a request meets them in is written once (:func:`stack`).

A request meets: CORS (first, so its headers reach every answer, 401s too), the access
line and request id, the HTTPS check (before the token: plain HTTP is refused unread), the
token check, the rate limit (after the token check, which names the client's token).

**HTTPS only** (:class:`RequireHttps`): bearer tokens travel over TLS only (RFC 6750,
section 5.3); ``require_https`` refuses the rest. Invariants:

- A request's scheme is the WSGI server's (``wsgi.url_scheme``: https only when the server
  itself speaks TLS), or what a trusted proxy said in ``X-Forwarded-Proto`` or ``Forwarded``
  (:mod:`plant_store.util.forwarded` has applied it by the time this middleware runs, and
  removed what an untrusted peer sent): an untrusted peer's forged header counts for
  nothing, so its request is http.
- :class:`RequireHttps` runs before the token check: a request over plain HTTP is refused
  whatever its ``Authorization`` says, so the answer tells the client nothing about its
  token. The probes (``/health``, ``/ready``) stay plain: an orchestrator probes over
  loopback or a private network, and they carry no token.

**Rate limits** (:class:`RateLimit`, the ``rate_limit`` and ``rate_limit_burst``
settings): a token bucket per client, in memory, checked before routing, so a refused
request costs no body parse and no store. A client is the bearer token it sent, by label,
when the token verified (the token check puts the label on ``req.context.token_label``);
else its address, ``REMOTE_ADDR`` after the forwarded headers were applied, so behind a
trusted proxy it is the real client. ``/health`` and ``/ready`` are never limited: an
orchestrator must reach them. Buckets are per process: with several workers or instances,
each takes the rate on its own (``docs/deploying.rst`` says when nginx's ``limit_req``
fits better).
"""

import collections
import math
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

import falcon

from plant_store.config import Config
from plant_store.events import Events
from plant_store.http.access_log import AccessLog
from plant_store.http.auth import BearerAuth, Tokens
from plant_store.http.operational import DOCS, HEALTH, INDEX, METRICS, OPENAPI, READY

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
          log_stream: TextIO | None = None, count_each: bool = False) -> list[Any]:
    """The middleware, in order, telling ``events`` of the answers (``requests``, in
    batches, or each as it is answered with ``count_each``), the access lines dropped
    (``dropped``) and each 401 (``refused``). The access log is the first but for CORS:
    :func:`access_log_of`."""
    public = PUBLIC_PATHS | ({METRICS} if config.metrics == "public" else set())
    middleware: list[Any] = [  # falcon's middleware protocols
        AccessLog(log_stream, config.log_level, quiet_paths=QUIET_PATHS,
                  quiet_prefixes=PUBLIC_PREFIXES, log_format=config.log_format,
                  events=events, count_each=count_each),
        BearerAuth(tokens, public, PUBLIC_PREFIXES, preflight=bool(config.cors_allow_origins),
                   events=events)]
    if config.require_https:
        middleware.insert(1, RequireHttps())
    if config.rate_limit:
        middleware.append(RateLimit(Buckets(config.rate_limit, config.rate_limit_burst)))
    if config.cors_allow_origins:
        origins = config.cors_allow_origins
        middleware.insert(0, _CORS(
            allow_origins="*" if "*" in origins else origins, expose_headers=CORS_EXPOSED))
    return middleware


def access_log_of(middleware: list[Any]) -> AccessLog:
    """The access log among :func:`stack`'s middleware."""
    return next(each for each in middleware if isinstance(each, AccessLog))


class _CORS(falcon.CORSMiddleware[Any, Any]):
    """Falcon's CORS, plus ``Vary: Origin`` when the answer depends on the origin (a list of
    them, not ``*``), so that a shared cache never gives one origin's answer to another."""

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: object,
                         req_succeeded: bool) -> None:
        super().process_response(req, resp, resource, req_succeeded)
        if self.allow_origins != "*":
            resp.append_header("Vary", "Origin")


PROBES = frozenset({"/health", "/ready"})
MESSAGE = ("This service takes requests over HTTPS only (require_https): send it to the "
           "https:// URL. A bearer token sent over plain HTTP can be read on the way; if "
           "this request carried one, revoke it and use a new one.")


class RequireHttps:
    """Falcon middleware: 403 in the Error shape for a request whose scheme is not https,
    but for the probes; put it before the token check."""

    def __init__(self, probes: frozenset[str] = PROBES) -> None:
        self._probes = probes

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.scheme != "https" and req.path not in self._probes:
            raise falcon.HTTPForbidden(description=MESSAGE)


EXEMPT = frozenset({"/health", "/ready"})
SIZE = 10_000  # buckets at most: about 150 bytes each
# A nanosecond: what float sums of intervals may be off by (0.1 * 5 is not 0.5), so that a
# full bucket still takes burst + 1 at once.
SLACK = 1e-9


class Buckets:
    """A token bucket per client key, of ``burst + 1`` requests, refilled at ``rate`` a
    second; stored as the one time at which it will be full again (the "theoretical arrival
    time" of GCRA), which says everything the bucket's level would.

    Invariants:

    - A bucket absent from the table is a full one: a new client, or one evicted, starts
      full, as one idle for ``(burst + 1) / rate`` seconds would be.
    - ``take`` takes a request iff the bucket holds one: ``max(full_at, now) - now <=
      burst / rate`` (give or take ``SLACK``), and then moves ``full_at`` one interval
      (``1 / rate``) later. A refused request takes nothing, so a client that keeps sending
      past its limit is still served at ``rate``.
    - The table holds at most ``size`` buckets, in least recently used order (under one
      lock, with the clock read inside it, so the times of one key never go back). A new
      key past ``size`` evicts the least recently used one. That loses nothing when its
      bucket was full; it was not full only if it was used within the last ``(burst + 1) /
      rate`` seconds, and then so were all ``size - 1`` others: it takes ``size`` clients
      active within that time for a client to gain, at most, one bucket's worth.
    """

    def __init__(self, rate: float, burst: int, size: int = SIZE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst < 0 or size < 1:
            raise ValueError("rate must be above 0, burst at least 0, size at least 1")
        self._interval = 1 / rate
        self._tolerance = burst / rate  # how far ahead of now full_at may be, and still take
        self._size = size
        self._clock = clock
        self._lock = threading.Lock()
        self._full_at: collections.OrderedDict[str, float] = collections.OrderedDict()

    def take(self, key: str) -> float:
        """Take one request from ``key``'s bucket: 0.0 if taken, else the seconds until
        one would be (above 0)."""
        with self._lock:
            now = self._clock()
            table = self._full_at
            full_at = table.get(key)
            if full_at is None:
                if len(table) >= self._size:
                    table.popitem(last=False)
                table[key] = now + self._interval
                return 0.0
            table.move_to_end(key)
            start = full_at if full_at > now else now
            wait = start - now - self._tolerance
            if wait > SLACK:
                return wait
            table[key] = start + self._interval
            return 0.0

    def __len__(self) -> int:
        return len(self._full_at)


class RateLimit:
    """The middleware: after the token check (which names the token), before routing."""

    def __init__(self, buckets: Buckets, exempt: frozenset[str] = EXEMPT) -> None:
        self._buckets = buckets
        self._exempt = exempt

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.path in self._exempt:
            return
        label = getattr(req.context, "token_label", None)
        # An address has no space in it, so no label can pass for one.
        key = "token " + label if label is not None else req.env.get("REMOTE_ADDR") or "-"
        wait = self._buckets.take(key)
        if wait:
            seconds = max(1, math.ceil(wait))
            who = "token" if label is not None else "address"
            raise falcon.HTTPTooManyRequests(
                description=f"Too many requests from this {who}; retry in {seconds} s.",
                retry_after=seconds)
