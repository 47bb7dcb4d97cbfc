"""GET and PUT /plants/{id}, DELETE's If-Match and GET /plants?tag=, row by row through the
contract's table, through WebTest on an ``app`` the running module gives: the memory and
JSON-file stores' (tests/unit/http/test_plant_update.py), PostgreSQL's
(tests/postgres/test_plant_update_webtest_pg.py). Over real HTTP:
tests/integration/test_plant_update_http.py."""

import io
import json
import os
import re

import pytest
import webtest

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.http import etags
from plant_store.http.schemas import PlantUpdateSchema
from plant_store.stores.records import Plant
from support.assertions import assert_error
from support.openapi import resolve

# A version, strong: three parts. The memory and JSON-file stores: epoch (hex), create,
# revision; PostgreSQL: position, revision, the last write's stamp (16 hex digits).
STRONG = re.compile(r'"[0-9a-f]+\.[0-9]+\.[0-9a-f]+"')


def served(opened, tokens, token, /, **settings):
    """The suite's app on the ``opened`` store (``settings``: the Config's, ``store``
    included): pages of two, bodies of at most 1 KiB, through WebTest with the token sent;
    the store as its ``.store``."""
    config = Config(page_size=2, max_body_size=1024, **settings)
    test_app = webtest.TestApp(
        create_app(config, store=opened, tokens=tokens, log_stream=io.StringIO()),
        extra_environ={"HTTP_AUTHORIZATION": f"Bearer {token}"})
    test_app.store = opened
    return test_app


def put(app, plant_id, body, *, headers=None, content_type="application/json"):
    if not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    return app.put(f"/plants/{plant_id}", body, content_type=content_type,
                   headers=headers or {}, status="*")


@pytest.fixture
def fern(app):
    app.store.create(Plant(1, "Fern", "green"))
    return app.get("/plants/1").headers["ETag"]


# GET /plants/{id}


def test_get_answers_the_plant_without_id_and_a_strong_etag(app, fern):
    response = app.get("/plants/1", status=200)
    assert response.content_type == "application/json"
    assert response.json == {"name": "Fern", "tag": "green"}
    assert STRONG.fullmatch(fern)
    assert fern == etags.etag(app.store.fetch(1).version)


def test_head_answers_the_headers_alone(app, fern):
    response = app.head("/plants/1", status=200)
    assert response.headers["ETag"] == fern and response.body == b""


def test_a_plant_without_tag_has_none_in_its_body(app):
    app.store.create(Plant(2, "Bare"))
    assert app.get("/plants/2").json == {"name": "Bare"}


@pytest.mark.parametrize("header", ["{}", "W/{}", '"other", {}', "*", ' ,{} , '])
def test_if_none_match_naming_the_current_etag_is_304(app, fern, header):
    response = app.get("/plants/1", headers={"If-None-Match": header.format(fern)}, status=304)
    assert response.body == b"" and response.headers["ETag"] == fern


def test_if_none_match_naming_another_etag_is_200(app, fern):
    response = app.get("/plants/1", headers={"If-None-Match": '"other"'}, status=200)
    assert response.json == {"name": "Fern", "tag": "green"}


def test_get_of_an_unknown_id_is_404(app):
    assert assert_error(app.get("/plants/5", status="*"), 404) == "There is no plant with id 5."


@pytest.mark.parametrize("text", ["x", "1.0", "9223372036854775808", "+1", "%201", "%EF%BC%91"])
def test_get_of_an_id_not_an_int64_is_400(app, text):
    assert assert_error(app.get(f"/plants/{text}", status="*"), 400).startswith("id: ")


@pytest.mark.parametrize("header", ['"unterminated', "abc", '"a" "b"', 'W/ "a"', '*, "a"',
                                    "", '"a"\x01'])
def test_a_malformed_conditional_header_is_400_naming_it(app, fern, header):
    for method, name in [("get", "If-None-Match"), ("put", "If-Match"), ("delete", "If-Match")]:
        if method == "put":
            response = put(app, 1, {"name": "x"}, headers={name: header})
        else:
            response = getattr(app, method)("/plants/1", headers={name: header}, status="*")
        assert assert_error(response, 400).startswith(f"{name}: ")
    assert app.store.get(1) == Plant(1, "Fern", "green")


# PUT /plants/{id}


def test_put_replaces_name_and_tag_and_answers_the_new_etag(app, fern):
    response = put(app, 1, {"name": "Fern II", "tag": "blue"})
    assert response.status_int == 200
    assert response.json == {"name": "Fern II", "tag": "blue"}
    assert response.headers["ETag"] == etags.etag(app.store.fetch(1).version) != fern
    assert app.get("/plants/1").headers["ETag"] == response.headers["ETag"]
    assert app.store.get(1) == Plant(1, "Fern II", "blue")


def test_put_without_tag_removes_it(app, fern):
    assert put(app, 1, {"name": "Fern"}).json == {"name": "Fern"}
    assert app.store.get(1) == Plant(1, "Fern", None)


def test_an_updated_plant_keeps_its_place_in_the_listing(app):
    for plant_id in (5, 3, 4):
        app.store.create(Plant(plant_id, f"p{plant_id}"))
    put(app, 3, {"name": "moved?"})
    assert app.get("/plants?limit=10").json == [{"name": "p5"}, {"name": "moved?"},
                                                {"name": "p4"}]


@pytest.mark.parametrize("header", ["{}", '"other", {}', "*", '{},W/"x"'])
def test_put_with_if_match_naming_the_current_etag_is_200(app, fern, header):
    response = put(app, 1, {"name": "New"}, headers={"If-Match": header.format(fern)})
    assert response.status_int == 200 and app.store.get(1) == Plant(1, "New")


@pytest.mark.parametrize("header", ['"stale"', "W/{}", '"x", "y"'])
def test_put_with_a_stale_or_weak_if_match_is_412_and_changes_nothing(app, fern, header):
    response = put(app, 1, {"name": "New"}, headers={"If-Match": header.format(fern)})
    assert "changed" in assert_error(response, 412)
    assert app.store.get(1) == Plant(1, "Fern", "green")


def test_a_retried_conditional_update_is_200(app, fern):
    """RFC 9110 13.1.1: the stored plant already equals the body, so the update went through."""
    first = put(app, 1, {"name": "New"}, headers={"If-Match": fern})
    again = put(app, 1, {"name": "New"}, headers={"If-Match": fern})
    assert first.status_int == again.status_int == 200
    assert again.headers["ETag"] == first.headers["ETag"]


def test_lost_update_is_prevented(app, fern):
    """Two clients read the same ETag; the second one's write is refused, not lost."""
    assert put(app, 1, {"name": "Alice's"}, headers={"If-Match": fern}).status_int == 200
    assert_error(put(app, 1, {"name": "Bob's"}, headers={"If-Match": fern}), 412)
    assert app.store.get(1).name == "Alice's"


def test_put_to_an_unknown_id_is_404_and_creates_nothing(app):
    for headers in ({}, {"If-Match": "*"}):
        assert_error(put(app, 9, {"name": "x"}, headers=headers), 404)
    assert app.store.get(9) is None and len(app.store) == 0


def test_put_with_an_id_other_than_the_paths_is_400_naming_id(app, fern):
    message = assert_error(put(app, 1, {"id": 2, "name": "x"}), 400)
    assert message.startswith("id: ")
    assert app.store.get(1) == Plant(1, "Fern", "green") and app.store.get(2) is None


def test_put_with_the_paths_id_in_the_body_is_accepted(app, fern):
    assert put(app, 1, {"id": 1, "name": "x", "extra": [1]}).json == {"name": "x"}


@pytest.mark.parametrize(("body", "field"), [
    ({}, "name"), ({"name": 5}, "name"), ({"name": "x", "tag": None}, "tag"),
    ({"name": "x", "tag": 1}, "tag"), ({"id": "1", "name": "x"}, "id"),
    ({"id": 1.0, "name": "x"}, "id"), ({"id": True, "name": "x"}, "id"),
])
def test_an_invalid_body_is_400_naming_the_field(app, fern, body, field):
    assert assert_error(put(app, 1, body), 400).startswith(f"{field}: ")
    assert app.store.get(1) == Plant(1, "Fern", "green")


@pytest.mark.parametrize("body", [b"", b"[]", b"{", b'"x"', b"\xff"])
def test_a_body_that_is_not_a_json_object_is_400(app, fern, body):
    assert_error(put(app, 1, body), 400)


def test_wrong_content_type_is_415(app, fern):
    assert_error(put(app, 1, '{"name": "x"}', content_type="text/plain"), 415)


def test_a_body_too_large_is_413(app, fern):
    assert_error(put(app, 1, {"name": "x" * 2000}), 413)
    assert app.store.get(1) == Plant(1, "Fern", "green")


def test_a_body_equal_to_the_stored_plant_writes_nothing(app, fern):
    path = getattr(app.store, "path", None)
    size = path and os.path.getsize(path)
    response = put(app, 1, {"name": "Fern", "tag": "green"}, headers={"If-Match": '"old"'})
    assert response.status_int == 200 and response.headers["ETag"] == fern
    assert not path or os.path.getsize(path) == size


def test_post_after_an_update_replays_the_new_plant_and_conflicts_with_the_old(app, fern):
    put(app, 1, {"name": "New", "tag": "t"})
    assert app.post_json("/plants", {"id": 1, "name": "New", "tag": "t"}, status=200).json == {
        "name": "New", "tag": "t"}
    assert_error(app.post_json("/plants", {"id": 1, "name": "Fern", "tag": "green"},
                               status="*"), 409)


def test_an_update_owes_no_webhook(app):
    app.store.create(Plant(1, "Fern"), ["http://127.0.0.1:9/hook"])
    put(app, 1, {"name": "Fern II"})
    assert [d.plant_id for d in app.store.deliveries()] == [1]
    assert json.loads(app.store.deliveries()[0].body)["name"] == "Fern"


# DELETE /plants/{id} with If-Match


def test_delete_with_a_stale_or_weak_if_match_is_412_and_keeps_the_plant(app, fern):
    for header in ['"stale"', f"W/{fern}"]:
        assert_error(app.delete("/plants/1", headers={"If-Match": header}, status="*"), 412)
    assert app.store.get(1) == Plant(1, "Fern", "green")


def test_delete_with_the_current_etag_is_204(app, fern):
    app.delete("/plants/1", headers={"If-Match": fern}, status=204)
    assert_error(app.delete("/plants/1", headers={"If-Match": fern}, status="*"), 404)


def test_an_etag_after_delete_and_create_again(app, fern):
    """The ETag names a version, not the content: the same plant created again has a new
    one, so a stale If-Match (a lost answer's retry) never deletes or overwrites it."""
    app.delete("/plants/1", status=204)
    app.post_json("/plants", {"id": 1, "name": "Fern", "tag": "green"}, status=200)
    again = app.get("/plants/1").headers["ETag"]
    assert again != fern
    assert_error(put(app, 1, {"name": "x"}, headers={"If-Match": fern}), 412)
    assert_error(app.delete("/plants/1", headers={"If-Match": fern}, status="*"), 412)
    assert app.get("/plants/1", headers={"If-None-Match": fern}, status=200).json == {
        "name": "Fern", "tag": "green"}


def test_a_retried_put_never_overwrites_a_later_acknowledged_one(app, fern):
    """The hostile round 5, finding 2: A's PUT (If-Match: fern) went through but its
    answer was lost; B put the plant back as it was; A's retry, as the 503 advises, must
    not undo B's update: 412, and B's version stays."""
    first = put(app, 1, {"name": "Fern", "tag": "outdoor"}, headers={"If-Match": fern})
    assert first.status_int == 200  # A's, answer lost
    back = put(app, 1, {"name": "Fern", "tag": "green"},
               headers={"If-Match": first.headers["ETag"]})
    assert back.status_int == 200 and back.headers["ETag"] not in (fern, first.headers["ETag"])
    retry = put(app, 1, {"name": "Fern", "tag": "outdoor"}, headers={"If-Match": fern})
    assert "is not at that ETag" in assert_error(retry, 412)
    got = app.get("/plants/1")
    assert got.json == {"name": "Fern", "tag": "green"} and got.headers["ETag"] == back.headers[
        "ETag"]
    # A retry meeting its own write (nothing came between) is 200, its ETag unchanged.
    mine = put(app, 1, {"name": "Fern", "tag": "blue"}, headers={"If-Match": back.headers["ETag"]})
    again = put(app, 1, {"name": "Fern", "tag": "blue"}, headers={"If-Match": back.headers["ETag"]})
    assert again.status_int == 200 and again.headers["ETag"] == mine.headers["ETag"]


# GET /plants?tag=T


def names(response):
    return [plant["name"] for plant in response.json]


def test_the_tag_filter_is_exact_in_creation_order_and_its_next_link_keeps_it(app):
    tags = ["a&b c/é", "A&B C/é", "", None, "a&b c/é"]
    for plant_id, tag in enumerate(tags * 2):
        app.store.create(Plant(plant_id, f"p{plant_id}", tag))
    response = app.get("/plants", {"tag": "a&b c/é"}, status=200)
    assert names(response) == ["p0", "p4"]
    link = response.headers["Link"]
    assert "tag=a%26b%20c%2F%C3%A9" in link
    next_url = re.search(r"<http://[^/]+([^>]*)>", link).group(1)
    response = app.get(next_url, status=200)
    assert names(response) == ["p5", "p9"] and "Link" not in response.headers
    assert names(app.get("/plants?tag=&limit=10")) == ["p2", "p7"]


def test_the_next_link_of_a_tag_listing_stays_within_a_proxys_header_buffer(app):
    """The hostile round 5, item 7: the next page's Link repeats the tag, percent-encoded,
    so a 450-character CJK tag made 4.3 KB of answer headers, past nginx's default 4 KiB
    proxy_buffer_size. A tag filter is at most 256 characters: the longest CJK one's
    headers fit, and a longer one is 400 naming the rule; its plants are in the full list."""
    longest = "\u8517" * 256  # 9 bytes each, percent-encoded
    for plant_id in range(3):
        app.store.create(Plant(plant_id, "p", longest))
    response = app.get("/plants", {"tag": longest, "limit": 1}, status=200)
    headers = "".join(f"{name}: {value}\r\n" for name, value in response.headerlist)
    assert len(headers.encode()) < 4096 and "Link" in response.headers
    app.store.create(Plant(9, "q", longest + "\u8517"))
    message = assert_error(app.get("/plants", {"tag": longest + "\u8517"}, status="*"), 400)
    assert message.startswith("tag: ") and "256 characters" in message
    assert names(app.get("/plants?limit=10")) == ["p", "p", "p", "q"]


def test_the_tag_filter_follows_updates(app):
    for plant_id in range(4):
        app.store.create(Plant(plant_id, f"p{plant_id}", "x"))
    put(app, 2, {"name": "p2"})
    put(app, 0, {"name": "p0", "tag": "y"})
    put(app, 0, {"name": "p0", "tag": "x"})
    assert names(app.get("/plants?tag=x&limit=10")) == ["p0", "p1", "p3"]


def test_a_repeated_tag_or_an_unknown_parameter_is_400(app):
    assert assert_error(app.get("/plants?tag=a&tag=b", status="*"), 400).startswith("tag: ")
    assert assert_error(app.get("/plants?tags=a", status="*"), 400).startswith("tags: ")


# Hostile conditional headers


def test_a_long_if_match_list_is_parsed_up_to_its_bound(app, fern):
    header = ", ".join(f'"{n:032x}"' for n in range(200)) + f", {fern}"
    assert len(header) <= etags.MAX_HEADER
    assert put(app, 1, {"name": "x"}, headers={"If-Match": header}).status_int == 200
    evil = '"' + "a" * (etags.MAX_HEADER - 1)  # never closed: the regex must not backtrack
    assert_error(put(app, 1, {"name": "y"}, headers={"If-Match": evil}), 400)


@pytest.mark.parametrize("name", ["If-Match", "If-None-Match"])
def test_a_conditional_header_past_its_bound_is_431_before_the_store(app, fern, name):
    """The hostile round 5, finding 4: a 253 KB If-Match list was parsed under the JSON
    file's lock, 40 ms each; now a header past MAX_HEADER is refused unparsed, and the
    store is never asked."""
    header = ", ".join(f'"{n:032x}"' for n in range(6000)) + f", {fern}"
    asked = []
    app.store.update = lambda *args: asked.append(args)
    app.store.delete = lambda *args: asked.append(args)
    message = assert_error(put(app, 1, {"name": "x"}, headers={name: header}), 431)
    assert message.startswith(f"{name}: ") and f"{etags.MAX_HEADER:,} bytes" in message
    assert_error(app.delete("/plants/1", headers={name: header}, status="*"), 431)
    assert asked == []


def test_if_none_match_star_on_put_and_delete_never_replaces_a_stored_plant(app, fern):
    """A client asking "only if there is none" must not overwrite (RFC 9110 13.1.2)."""
    for header in ["*", fern, f"W/{fern}"]:
        message = assert_error(put(app, 1, {"name": "x"}, headers={"If-None-Match": header}),
                               412)
        assert "If-None-Match" in message
        assert_error(app.delete("/plants/1", headers={"If-None-Match": header}, status="*"),
                     412)
    assert app.store.get(1) == Plant(1, "Fern", "green")
    assert put(app, 1, {"name": "x"}, headers={"If-None-Match": '"other"'}).status_int == 200


def test_both_conditions_must_hold(app, fern):
    headers = {"If-Match": fern, "If-None-Match": fern}
    assert "If-Match" not in assert_error(put(app, 1, {"name": "x"}, headers=headers), 412)
    headers = {"If-Match": '"stale"', "If-None-Match": '"other"'}
    assert "(If-Match)" in assert_error(put(app, 1, {"name": "x"}, headers=headers), 412)


def test_get_with_a_stale_if_match_is_412(app, fern):
    assert_error(app.get("/plants/1", headers={"If-Match": '"stale"'}, status="*"), 412)
    assert app.get("/plants/1", headers={"If-Match": fern}, status=200).json["name"] == "Fern"


def test_the_documents_plant_update_is_the_schemas():
    documented = resolve({"$ref": "#/components/schemas/PlantUpdate"})
    schema = PlantUpdateSchema()
    assert set(documented["properties"]) == set(schema.fields) == {"id", "name", "tag"}
    assert documented["required"] == ["name"]
    assert documented["properties"]["id"]["format"] == "int64"
