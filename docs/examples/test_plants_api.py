"""Your own tests against Plant Store, with WebTest: copy this file and run ``pytest``.

``pip install /path/to/plant-store webtest pytest`` (the clone, or its built wheel). The
``plant_store.testing`` plugin gives each test a
fresh app on a memory store (``plant_store_app``) and a token it accepts
(``plant_store_token``); nothing is written to disk.
"""

import pytest
import webtest

pytest_plugins = ["plant_store.testing"]


@pytest.fixture
def api(plant_store_app, plant_store_token):
    app = webtest.TestApp(plant_store_app)
    app.authorization = ("Bearer", plant_store_token)
    return app


def test_a_new_plant_is_listed(api):
    api.post_json("/plants", {"id": 1, "name": "Monstera", "tag": "aroid"})
    assert api.get("/plants").json == [{"name": "Monstera", "tag": "aroid"}]


def test_the_same_plant_twice_is_one_plant(api):
    api.post_json("/plants", {"id": 1, "name": "Monstera"})
    api.post_json("/plants", {"id": 1, "name": "Monstera"})
    assert len(api.get("/plants").json) == 1


def test_a_bad_plant_gets_the_error_shape(api):
    answer = api.post_json("/plants", {"id": "one", "name": "Monstera"}, status=400)
    assert answer.json["error"] == 400 and "id" in answer.json["message"]


def test_without_a_token_the_api_says_401(plant_store_app):
    answer = webtest.TestApp(plant_store_app).get("/plants", status=401)
    assert answer.json["error"] == 401


def test_your_settings(plant_store_token):
    from plant_store.testing import make_app

    app = webtest.TestApp(make_app(tokens=[plant_store_token], url_prefix="/api",
                                   page_size=1))
    app.authorization = ("Bearer", plant_store_token)
    for plant_id in (1, 2):
        app.post_json("/api/plants", {"id": plant_id, "name": f"Fern {plant_id}"})
    first = app.get("/api/plants")
    assert len(first.json) == 1 and first.headers["Link"].endswith("; rel=next")
