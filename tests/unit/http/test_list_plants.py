"""GET /plants: pages in creation order, a Link to the next, strict parameters."""

import io
import re

import pytest
import webtest

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.stores import MemoryStore
from plant_store.stores.records import Plant
from support.assertions import assert_error


@pytest.fixture
def small_pages(tmp_path, tokens, token):
    """The app with page_size 2 and max_page_size 3, holding plants 0..6."""
    store = MemoryStore()
    for i in range(7):
        store.create(Plant(i, f"plant {i}", "t" if i % 2 else None))
    config = Config(store="memory", page_size=2, max_page_size=3)
    return webtest.TestApp(create_app(config, store=store, tokens=tokens, log_stream=io.StringIO()),
                           extra_environ={"HTTP_AUTHORIZATION": f"Bearer {token}"})


def next_link(response):
    link = response.headers.get("Link")
    if link is None:
        return None
    match = re.fullmatch(r'<([^>]+)>; rel="?next"?', link)
    assert match, link
    return match.group(1)


def test_empty_store_is_an_empty_list_without_link(app):
    response = app.get("/plants", status=200)
    assert response.content_type == "application/json"
    assert response.json == []
    assert "Link" not in response.headers


def test_default_page_and_plants_without_id(small_pages):
    response = small_pages.get("/plants", status=200)
    assert response.json == [{"name": "plant 0"}, {"name": "plant 1", "tag": "t"}]
    assert next_link(response) == "http://localhost:80/plants?limit=2&cursor=2"


def test_following_links_gives_every_plant_once_in_order(small_pages):
    url, names = "/plants?limit=3", []
    while url:
        response = small_pages.get(url, status=200)
        assert len(response.json) <= 3
        names += [plant["name"] for plant in response.json]
        url = next_link(response)
    assert names == [f"plant {i}" for i in range(7)]


def test_a_limit_over_the_maximum_is_capped_not_refused(small_pages):
    response = small_pages.get("/plants?limit=2147483647", status=200)
    assert len(response.json) == 3


def test_the_link_carries_the_mount_prefix(small_pages):
    response = small_pages.get("/plants?limit=1", extra_environ={"SCRIPT_NAME": "/api"})
    assert next_link(response) == "http://localhost:80/api/plants?limit=1&cursor=1"


@pytest.mark.parametrize("query", [
    "limit=0", "limit=-1", "limit=1.5", "limit=abc", "limit=", "limit=2147483648",
    "limit=1&limit=2", "limit=%201", "limit=1_0", "limit=99999999999",
])
def test_a_bad_limit_is_400_naming_it(small_pages, query):
    message = assert_error(small_pages.get(f"/plants?{query}", status="*"), 400)
    assert message == "limit: Must be an integer from 1 to 2147483647."


@pytest.mark.parametrize("query", ["cursor=", "cursor=-1", "cursor=abc", "cursor=1e3",
                                   "cursor=1234567890123456789"])
def test_a_bad_cursor_is_400_naming_it(small_pages, query):
    message = assert_error(small_pages.get(f"/plants?{query}", status="*"), 400)
    assert message == "cursor: Must be a cursor from a Link header."


def test_an_unknown_parameter_is_400_naming_it(small_pages):
    message = assert_error(small_pages.get("/plants?page=2", status="*"), 400)
    assert message == "page: Not a parameter here; use limit, cursor and tag."


def test_listing_needs_the_token(small_pages):
    small_pages.extra_environ = {}
    assert_error(small_pages.get("/plants", status="*"), 401)
