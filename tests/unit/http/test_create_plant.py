"""POST /plants, row by row through the contract's table."""

import json
import sys

import orjson
import pytest
import webob
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plant_store.http import json_fallback
from plant_store.stores.records import Plant
from support.assertions import assert_error

INT64_MAX = 2**63 - 1


def post(app, body, *, status=None, content_type="application/json", **kwargs):
    if not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    return app.post("/plants", body, content_type=content_type, status=status or "*", **kwargs)


def test_valid_new_plant_is_created_and_returned_without_id(app):
    response = post(app, {"id": 1, "name": "Monstera", "tag": "aroid"}, status=200)
    assert response.content_type == "application/json"
    assert response.json == {"name": "Monstera", "tag": "aroid"}
    assert app.store.get(1) == Plant(1, "Monstera", "aroid")


def test_tag_is_echoed_only_when_sent(app):
    assert post(app, {"id": 2, "name": "Fern"}, status=200).json == {"name": "Fern"}
    assert app.store.get(2) == Plant(2, "Fern", None)


@pytest.mark.parametrize("plant_id", [0, -1, INT64_MAX, -(2**63)])
def test_int64_bounds_are_accepted(app, plant_id):
    post(app, {"id": plant_id, "name": "edge"}, status=200)
    assert app.store.get(plant_id).name == "edge"


def test_empty_strings_and_unicode_round_trip(app):
    name = "Ficus 🌿 e\u0301 \u202eright-to-left\u202c \x00\x1f"
    response = post(app, {"id": 3, "name": name, "tag": ""}, status=200)
    assert response.json == {"name": name, "tag": ""}


def test_replay_with_same_plant_is_200_and_writes_nothing(app):
    body = {"id": 4, "name": "Cactus", "tag": "succulent"}
    post(app, body, status=200)
    assert post(app, body, status=200).json == {"name": "Cactus", "tag": "succulent"}
    assert len(app.store) == 1


@pytest.mark.parametrize("second", [
    {"id": 5, "name": "Other", "tag": "succulent"},
    {"id": 5, "name": "Cactus"},
    {"id": 5, "name": "Cactus", "tag": "other"},
])
def test_same_id_different_plant_is_409_and_stored_plant_unchanged(app, second):
    post(app, {"id": 5, "name": "Cactus", "tag": "succulent"}, status=200)
    message = assert_error(post(app, second), 409)
    assert "5" in message
    assert app.store.get(5) == Plant(5, "Cactus", "succulent")


@pytest.mark.parametrize("body", [
    b"{not json", b"", b"\xff\xfe{}", '{"id": 1, "name": "caf\xe9"}'.encode("latin-1"),
    b"[]", b'"plant"', b"42", b"null", b'{"id": NaN, "name": "x"}',
    '{"id": 1, "name": "x"}'.encode("utf-16"),
])
def test_body_that_is_not_a_utf8_json_object_is_400(app, body):
    assert_error(post(app, body), 400)
    assert len(app.store) == 0


@pytest.mark.parametrize("plant_id", [
    None, True, False, 1.5, 1.0, "1", [1], {"n": 1}, 2**63, -(2**63) - 1, 10**30,
])
def test_id_that_is_not_an_int64_is_400_naming_id(app, plant_id):
    message = assert_error(post(app, {"id": plant_id, "name": "x"}), 400)
    assert message.startswith("id:")


def test_missing_id_is_400_naming_id(app):
    assert assert_error(post(app, {"name": "x"}), 400).startswith("id:")


@pytest.mark.parametrize("name", [None, 1, True, ["x"], {"x": 1}])
def test_name_not_a_string_is_400_naming_name(app, name):
    assert assert_error(post(app, {"id": 1, "name": name}), 400).startswith("name:")


def test_missing_name_is_400_naming_name(app):
    assert assert_error(post(app, {"id": 1}), 400).startswith("name:")


@pytest.mark.parametrize("tag", [None, 1, False, ["x"]])
def test_tag_present_but_not_a_string_is_400_naming_tag(app, tag):
    assert assert_error(post(app, {"id": 1, "name": "x", "tag": tag}), 400).startswith("tag:")
    assert len(app.store) == 0


def test_every_bad_field_is_named(app):
    message = assert_error(post(app, {"id": "x", "tag": 3}), 400)
    assert "id:" in message and "name:" in message and "tag:" in message


def test_unknown_fields_are_ignored_neither_stored_nor_echoed(app):
    response = post(app, {"id": 6, "name": "Aloe", "colour": "green", "id2": 1}, status=200)
    assert response.json == {"name": "Aloe"}
    assert app.store.get(6) == Plant(6, "Aloe", None)


@pytest.mark.parametrize("content_type", [
    "text/plain", "application/x-www-form-urlencoded", "application/jsonx", "",
])
def test_content_type_other_than_json_is_415(app, content_type):
    body = json.dumps({"id": 1, "name": "x"})
    assert_error(post(app, body, content_type=content_type), 415)
    assert len(app.store) == 0


@pytest.mark.parametrize("content_type", [
    "application/json; charset=utf-8", "Application/JSON", "application/json;charset=UTF-8",
])
def test_content_type_parameters_are_allowed(app, content_type):
    post(app, {"id": 7, "name": "x"}, content_type=content_type, status=200)


def test_body_over_the_limit_is_413(app):
    body = json.dumps({"id": 8, "name": "x" * 70_000})
    message = assert_error(post(app, body), 413)
    assert "65536" in message
    assert len(app.store) == 0


def test_body_just_under_the_limit_is_accepted(app):
    skeleton = json.dumps({"id": 9, "name": ""})
    name = "y" * (65536 - len(skeleton))
    body = json.dumps({"id": 9, "name": name})
    assert len(body) == 65536
    assert post(app, body, status=200).json == {"name": name}


def test_chunked_body_over_the_limit_is_413_without_reading_past_it(app):
    class Stream:
        """A body without Content-Length that records how much the app read."""

        def __init__(self):
            self.read_bytes = 0

        def read(self, size=-1):
            size = 1 << 20 if size < 0 else size
            self.read_bytes += size
            return b" " * size

    stream = Stream()
    request = webob.Request.blank("/plants", method="POST", content_type="application/json")
    request.environ.update({
        "wsgi.input": stream, "wsgi.input_terminated": True,
        "HTTP_AUTHORIZATION": app.extra_environ["HTTP_AUTHORIZATION"],
    })
    request.environ.pop("CONTENT_LENGTH", None)
    response = request.get_response(app.app)
    assert_error(response, 413)
    assert stream.read_bytes <= 65537


ID_RULE = "id: Must be an integer from -9223372036854775808 to 9223372036854775807."
NOT_A_STRING = "Not a valid string."
HUGE = "9" * 310  # beyond a double: orjson refuses it


@pytest.mark.parametrize(("body", "message"), [
    (f'{{"id": {HUGE}, "name": "x"}}', ID_RULE),
    (f'{{"id": -{HUGE}, "name": "x"}}', ID_RULE),
    ('{"id": 1e400, "name": "x"}', ID_RULE),
    ('{"id": -1E+999, "name": "x"}', ID_RULE),
    (f'{{"id": {"9" * 5000}, "name": "x"}}', ID_RULE),  # past Python's int digit limit
    (f'{{"id": {HUGE}}}', f"{ID_RULE} name: Missing data for required field."),
    (f'{{"id": 1, "name": {HUGE}}}', f"name: {NOT_A_STRING}"),
    ('{"id": 1, "name": 1e400}', f"name: {NOT_A_STRING}"),
    ('{"id": 1, "name": "x", "tag": -1e400}', f"tag: {NOT_A_STRING}"),
    (f'{{"id": 1e400, "name": "x", "tag": {HUGE}}}', f"{ID_RULE} tag: {NOT_A_STRING}"),
])
def test_a_number_too_large_for_a_double_is_400_naming_its_field(app, body, message):
    response = post(app, body)
    assert (assert_error(response, 400), len(app.store)) == (message, 0)


@given(digits=st.integers(min_value=20, max_value=2000), sign=st.sampled_from(["", "-"]),
       exponent=st.sampled_from(["", "e400", "E-5", ".5e999"]))
@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_number_outside_int64_is_the_id_message(app, digits, sign, exponent):
    body = f'{{"id": {sign}{"7" * digits}{exponent}, "name": "x"}}'
    assert assert_error(post(app, body), 400) == ID_RULE


@pytest.mark.parametrize("body", [
    '{"id": 1e400, "name": "x", "tag": NaN}',
    '{"id": 1e400, "name": "x", "tag": -Infinity}',
    '{"id": 1e400, "name": "\\ud800"}',  # a lone surrogate
    '{"id": 1e400, "name": "\\udc00\\ud800"}',
    '{"id": 1e400, "name": "x\x01"}',  # a raw control character
    '{"id": 1e400, "name": "x"} {}',
    '{"id": 1e400, "name": "x",}',
    '{"id": 1e400, \'name\': "x"}',
    '\ufeff{"id": 1e400, "name": "x"}',
    b'{"id": 1e400, "name": "caf\xe9"}',
    '{"id": 1e400, "name": "x"}'.encode("utf-16"),
    '{"id": 1e400, "x": ' + "[" * 1024 + "]" * 1024 + "}",  # orjson's limit: 1024 levels
    '{"id": 1e400, "x": ' + "[" * 30_000 + "]" * 30_000 + "}",
    '{"x": ' + "[" * 30_000 + "]" * 30_000 + ', "id": 1e400}',
])
def test_a_body_with_a_huge_number_is_still_held_to_strict_json(app, body):
    message = assert_error(post(app, body if isinstance(body, bytes) else body.encode()), 400)
    assert message == ("The request body is nested deeper than 1024 levels." if "[" * 1024 in
                       str(body) else "The request body is not valid UTF-8 JSON.")
    assert len(app.store) == 0


def test_a_huge_number_in_an_unknown_field_is_ignored_like_the_field(app):
    post(app, '{"id": 1, "name": "x", "extra": 1e400, "more": [-1e999]}', status=200)
    assert app.store.get(1) == Plant(1, "x", None)


def test_a_huge_number_does_not_change_how_deep_a_body_may_nest(app):
    body = '{"id": 1e400, "name": "x", "x": ' + "[" * 900 + "]" * 900 + "}"  # orjson allows it
    assert assert_error(post(app, body), 400) == ID_RULE


def test_the_fallback_keeps_orjsons_depth_limit_whatever_the_recursion_limit():
    def nested(levels):
        return ('{"id": 1e400, "x": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}").encode()

    error = orjson.JSONDecodeError(json_fallback.OUT_OF_RANGE, "", 0)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit + 2000)  # as an embedding application might
    try:
        assert json_fallback.reparse(nested(1024), error)["id"] == float("inf")
        with pytest.raises(ValueError):
            json_fallback.reparse(nested(1025), error)
    finally:
        sys.setrecursionlimit(limit)


def test_a_body_nested_too_deeply_says_so(app):
    body = b'{"id": 1, "name": "x", "extra": ' + b"[" * 1500 + b"]" * 1500 + b"}"
    response = app.post("/plants", body, content_type="application/json", expect_errors=True)
    assert assert_error(response, 400) == "The request body is nested deeper than 1024 levels."
