"""GET /docs: Swagger UI on the document, every file of it served by the service itself."""

import io
import re

import pytest
import webtest

from plant_store.app import create_app
from plant_store.http.operational import ASSET_CACHING, ASSETS
from plant_store.stores import MemoryStore
from support.assertions import assert_error
from support.openapi import DOCUMENT


@pytest.fixture
def anonymous(config, tokens):
    """The app with no token on any request."""
    return webtest.TestApp(create_app(config, store=MemoryStore(), tokens=tokens,
                                             log_stream=io.StringIO()))


def test_the_page_is_public_small_and_links_only_its_own_files(anonymous):
    response = anonymous.get("/docs", status=200)
    assert response.content_type == "text/html"
    assert response.headers["Cache-Control"] == "no-cache"
    assert "script-src 'self';" in response.headers["Content-Security-Policy"]
    assert len(response.body) < 1024
    links = re.findall(r'(?:href|src)="([^"]*)"', response.text)
    # Relative, so /api/docs loads /api/docs/...; and each one served.
    assert sorted(links) == sorted(f"docs/{name}" for name in ASSETS)
    assert "<script>" not in response.text  # the policy forbids inline scripts
    assert 'url: "openapi.json"' in anonymous.get("/docs/docs_page.js").text


@pytest.mark.parametrize("name", sorted(ASSETS))
def test_each_asset_has_its_type_and_is_cached_by_its_etag(anonymous, name):
    path, content_type = ASSETS[name]
    response = anonymous.get(f"/docs/{name}", status=200)
    assert response.headers["Content-Type"] == content_type
    assert response.body == path.read_bytes()
    assert response.headers["Cache-Control"] == ASSET_CACHING
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    etag = response.headers["ETag"]
    again = anonymous.get(f"/docs/{name}", headers={"If-None-Match": etag}, status=304)
    assert again.body == b"" and again.headers["ETag"] == etag
    anonymous.get(f"/docs/{name}", headers={"If-None-Match": "*"}, status=304)  # RFC 9110
    head = anonymous.head(f"/docs/{name}", status=200)
    assert head.body == b"" and head.headers["Content-Type"] == content_type


@pytest.mark.parametrize("name", [
    "swagger-initializer.js",  # in the package, but not served
    "LICENSE", "swagger-ui-bundle.js.map", "docs_page.py", "docs_page.html",
    "..", "%2E%2E", "..%2Fopenapi.json", "..%2F..%2Fsetup.cfg",
])
def test_any_other_name_under_docs_is_a_404_in_the_error_shape(anonymous, name):
    assert_error(anonymous.get(f"/docs/{name}", status=404), 404)


def test_the_document_lists_the_page_and_its_files():
    assert {"/docs", "/docs/{name}"} <= set(DOCUMENT["paths"])
    parameter = DOCUMENT["paths"]["/docs/{name}"]["get"]["parameters"][0]
    assert parameter["schema"]["enum"] == sorted(ASSETS)


