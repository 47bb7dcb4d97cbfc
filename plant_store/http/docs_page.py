"""The interactive page for the document: Swagger UI, every file of it served from here.

Nothing comes from a CDN, so the page works offline and behind a proxy prefix: the page links
its assets and the document by relative URLs (``/api/docs`` loads ``/api/docs/...`` and
``/api/openapi.json``). Only the files named in ``ASSETS`` are served, looked up by name, so
no path can reach another file. Swagger UI's files come from swagger-ui-py, found without
importing it (its package imports Jinja2 and PyYAML, which the page does not need).
"""

import functools
import hashlib
import importlib.resources
import importlib.util
import pathlib
import string

import falcon

from plant_store.http.operational import DOCUMENT

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
