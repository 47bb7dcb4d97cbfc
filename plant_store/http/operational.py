"""The operational paths, outside the seed's contract and the token: an index, liveness,
readiness, the spec and its interactive page, and ``/metrics``; and the route table.

The route table: each path template the service answers, named once, so that the app
(which gives each its resource) and the metrics (which name a refused request's route
before any routing) read the same list.

``/health`` says only that the process serves: a load balancer or orchestrator that
restarted the service whenever its database was down would restart every instance for
nothing. ``/ready`` says whether the store can take writes now; route traffic by it.

``/docs``, the interactive page for the document: Swagger UI, every file of it served from
here. Nothing comes from a CDN, so the page works offline and behind a proxy prefix: the
page links its assets and the document by relative URLs (``/api/docs`` loads
``/api/docs/...`` and ``/api/openapi.json``). Only the files named in ``ASSETS`` are
served, looked up by name, so no path can reach another file. Swagger UI's files come from
swagger-ui-py, found without importing it (its package imports Jinja2 and PyYAML, which
the page does not need).

``/metrics``: the exposition the metrics make, served; one scrape at a time.
"""

import functools
import hashlib
import importlib.resources
import importlib.util
import pathlib
import string
from collections.abc import Callable

import falcon
import orjson

from plant_store import __version__
from plant_store.stores import Store, StoreUnavailable
from plant_store.util.concurrency import SingleFlight
from plant_store.util.forwarded import base_url

PLANTS = "/plants"
PLANT = "/plants/{plant_id}"
INDEX = "/"
HEALTH = "/health"
READY = "/ready"
OPENAPI = "/openapi.json"
DOCS = "/docs"
DOCS_ASSET = "/docs/{name}"
METRICS = "/metrics"
ROUTES = (PLANTS, PLANT, INDEX, HEALTH, READY, OPENAPI, DOCS, DOCS_ASSET, METRICS)

DOCUMENT = orjson.loads(
    importlib.resources.files("plant_store.http").joinpath("openapi.json").read_bytes())
HEALTHY = orjson.dumps({"status": "ok"})
READY_BODY = orjson.dumps({"status": "ready", "version": __version__})  # which release answers


class HealthResource:
    """``GET /health``: liveness, 200 whenever the process serves; it asks the store nothing."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.data = HEALTHY
        resp.content_type = falcon.MEDIA_JSON

    on_head = on_get  # the same answer, without its body (Falcon drops it)


TOKENS_UNREADABLE = ("Every token is refused now: the token file cannot be read (the "
                     "server's log says why).")


class ReadyResource:
    """``GET /ready``: 200 (and the release) while the store can take writes, else 503
    naming why."""

    def __init__(self, store: Store,
                 tokens_problem: Callable[[], str | None] = lambda: None) -> None:
        """``tokens_problem()``: why every token is refused now (an unreadable token
        file), or None."""
        self._store = store
        self._tokens_problem = tokens_problem

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            self._store.check()
        except StoreUnavailable as exc:
            raise falcon.HTTPServiceUnavailable(
                description=f"The store cannot take writes now: {exc}") from None
        if self._tokens_problem() is not None:  # its path is the operator's to know
            raise falcon.HTTPServiceUnavailable(description=TOKENS_UNREADABLE)
        resp.data = READY_BODY
        resp.content_type = falcon.MEDIA_JSON

    on_head = on_get


class OpenApiResource:
    """The document, its ``servers`` URL saying where the client reached the service: the
    scheme, host and path prefix it used, as told by a trusted proxy where there is one."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.data = orjson.dumps({**DOCUMENT, "servers": [{"url": base_url(req)}]})
        resp.content_type = falcon.MEDIA_JSON

    on_head = on_get  # the same answer, without its body (Falcon drops it)


class IndexResource:
    """``GET /``: where to go from here, for a person or a client that starts at the root
    (without a token, it would get a bare 401 and no hint); ``/docs`` only where the
    interactive page is installed (the docs-page extra), since it answers 404 elsewhere."""

    def __init__(self, docs: bool) -> None:
        self._docs = docs

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        base = base_url(req)
        links = {"service": "plant-store", "docs": base + "/docs",
                 "openapi": base + "/openapi.json", "plants": base + "/plants"}
        if not self._docs:
            del links["docs"]
        resp.data = orjson.dumps(links)
        resp.content_type = falcon.MEDIA_JSON

    on_head = on_get


class MetricsResource:
    """``GET /metrics``. Concurrent scrapes share one exposition (:class:`SingleFlight`):
    a scrape costs about as much as seven ``/health`` requests, and a flood of them would
    otherwise take the CPU that creates need; none is answered with counts older than
    itself. ``exposition()``: the text and its media type."""

    def __init__(self, exposition: Callable[[], bytes], content_type: str) -> None:
        self._exposition = SingleFlight(exposition)
        self._content_type = content_type

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.data = self._exposition()
        resp.content_type = self._content_type

    on_head = on_get  # the same answer, without its body (Falcon drops it)


_OURS = importlib.resources.files("plant_store.http")
# swagger-ui-py, the docs-page extra, is a package: find_spec finds it, with its folder.
_SPEC = importlib.util.find_spec("swagger_ui")
INSTALLED = _SPEC is not None and bool(_SPEC.submodule_search_locations)
_SWAGGER_UI = pathlib.Path(
    _SPEC.submodule_search_locations[0] if INSTALLED else ".",  # type: ignore[union-attr, index]
    "static")
NOT_INSTALLED = ("The interactive page is not installed here: pip install "
                 "'plant-store[docs-page]'. The document is at openapi.json.")

JS = "text/javascript; charset=utf-8"
CSS = "text/css; charset=utf-8"
PNG = "image/png"
# Name under /docs/ -> (where it is, content type). Nothing else is served there.
ASSETS = {
    "swagger-ui-bundle.js": (_SWAGGER_UI / "swagger-ui-bundle.js", JS),
    "swagger-ui.css": (_SWAGGER_UI / "swagger-ui.css", CSS),
    "favicon-32x32.png": (_SWAGGER_UI / "favicon-32x32.png", PNG),
    "favicon-16x16.png": (_SWAGGER_UI / "favicon-16x16.png", PNG),
    "docs_page.js": (_OURS / "docs_page.js", JS),
}
# The assets change only with an upgrade: a day's cache, then a cheap 304 on the ETag.
ASSET_CACHING = "public, max-age=86400"
# The page itself is revalidated each time, so an upgrade's page never meets stale assets.
PAGE_CACHING = "no-cache"
# Scripts from here only (the page has no inline script); Swagger UI sets inline styles and
# draws its icons from data: URLs; "Try it out" calls this origin.
POLICY = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
          "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
          "frame-ancestors 'none'")

PAGE = string.Template(_OURS.joinpath("docs_page.html").read_text("utf-8")).substitute(
    title=DOCUMENT["info"]["title"]).encode()


@functools.cache
def _asset(name: str) -> tuple[bytes, str]:
    """The file's bytes and a strong ETag, read on first use and kept (about 1.7 MB)."""
    data = ASSETS[name][0].read_bytes()
    return data, hashlib.sha256(data).hexdigest()[:32]


class DocsPageResource:
    """``GET /docs``: the interactive page (Swagger UI), or a 404 saying how to install it."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        if not INSTALLED:
            raise falcon.HTTPNotFound(description=NOT_INSTALLED)
        resp.data = PAGE
        resp.content_type = falcon.MEDIA_HTML
        resp.cache_control = [PAGE_CACHING]
        resp.set_header("Content-Security-Policy", POLICY)
        resp.set_header("X-Content-Type-Options", "nosniff")

    on_head = on_get  # the same answer, without its body (Falcon drops it)


class DocsAssetResource:
    """``GET /docs/{name}``: the page's files, served by name from a fixed list."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        if name not in ASSETS or (not INSTALLED and name != "docs_page.js"):
            raise falcon.HTTPNotFound()
        data, etag = _asset(name)
        resp.etag = etag
        resp.cache_control = [ASSET_CACHING]
        resp.set_header("X-Content-Type-Options", "nosniff")
        if {etag, "*"} & set(req.if_none_match or ()):  # "*": any current version (RFC 9110)
            resp.status = falcon.HTTP_304
            return
        resp.data = data
        resp.content_type = ASSETS[name][1]

    on_head = on_get  # the same answer, without its body (Falcon drops it)
