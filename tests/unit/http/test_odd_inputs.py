"""Odd text round-trips code point for code point through the JSON-file store and a restart."""

import io
import json

import pytest
import webtest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plant_store.app import create_app
from plant_store.stores import JsonFileStore
from plant_store.stores.records import Plant
from support.assertions import assert_error

ODD_NAMES = {
    "emoji": "Monstera 🌿🪴 👩🏽‍🌾 🏳️‍🌈",
    "combining marks": "Cafe\u0301 n\u0303 Z\u0351\u0334a\u0336\u0358l\u0336g\u0363o",
    "nul and controls": "a\x00b\x01\x07\x08\t\n\r\x1b\x1f\x7f\x85z",
    "right to left": "\u202eenots\u202c שׁוֹשַׁנָּה وردة \u200f\u200e",
    "non-characters and private use": "\ufffe\uffff\U0010ffff\ue000",
    "astral planes": "\U0001d509\U0001d526\U0001d520\U0001d532\U0001d530 𒀀 \U0001f9ea",
    "quotes and escapes": "\"\\/\b\f\u2028\u2029</script>",
    "60 KiB ascii": "x" * 60 * 1024,
    "60 KiB emoji as UTF-8": "🌵" * (60 * 1024 // 4),
}


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path / "data")


def serve(data_dir, config, tokens, token):
    store = JsonFileStore(data_dir)
    app = webtest.TestApp(create_app(config, store=store, tokens=tokens, log_stream=io.StringIO()),
                          extra_environ={"HTTP_AUTHORIZATION": f"Bearer {token}"})
    return app, store


def post(app, body):
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    return app.post("/plants", data, content_type="application/json", status="*")


@pytest.mark.parametrize("name", ODD_NAMES.values(), ids=ODD_NAMES.keys())
def test_odd_names_round_trip_through_a_restart(data_dir, config, tokens, token, name):
    tag = name[::-1][:100]  # short, so the 60 KiB names stay within the 64 KiB body limit
    app, store = serve(data_dir, config, tokens, token)
    first = post(app, {"id": 1, "name": name, "tag": tag})
    assert first.status_int == 200
    assert first.json == {"name": name, "tag": tag}
    store.close()

    app, store = serve(data_dir, config, tokens, token)
    try:
        assert store.get(1) == Plant(1, name, tag)
        replay = post(app, {"id": 1, "name": name, "tag": tag})
        assert replay.status_int == 200
        assert replay.body == first.body
        assert_error(post(app, {"id": 1, "name": name + "\u0301"}), 409)
    finally:
        store.close()


def test_a_lone_surrogate_is_400_not_a_crash(app):
    response = app.post("/plants", b'{"id": 1, "name": "\\ud800"}',
                        content_type="application/json", status="*")
    assert_error(response, 400)
    assert len(app.store) == 0


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.text(), min_size=1, max_size=5))
def test_any_text_round_trips_through_a_restart(tmp_path_factory, config, tokens, token, names):
    data_dir = str(tmp_path_factory.mktemp("data"))
    app, store = serve(data_dir, config, tokens, token)
    for plant_id, name in enumerate(names):
        assert post(app, {"id": plant_id, "name": name}).status_int == 200
    store.close()
    store = JsonFileStore(data_dir)
    try:
        assert [store.get(i).name for i in range(len(names))] == names
    finally:
        store.close()
