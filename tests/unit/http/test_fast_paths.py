"""Each fast path of a create against the path it shortcuts, on any input: the same result,
or the same refusal (status and words)."""

import io
import json

import falcon
import falcon.testing
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from marshmallow import ValidationError

from plant_store.http.access_log import AccessLog
from plant_store.http.plants import PlantsResource, read_new_plant, read_object
from plant_store.http.schemas import PlantSchema, describe, load_new_plant
from plant_store.stores import MemoryStore
from plant_store.stores.records import Plant

MAX_BODY = 64
SETTINGS = settings(max_examples=400, deadline=None)

objects = st.dictionaries(st.sampled_from(["id", "name", "tag", "x"]),
                          st.integers() | st.text(max_size=5) | st.none(), max_size=4)
# NewPlants, near and past the id's bounds, with and without a tag, and what else may be sent
new_plants = st.builds(
    lambda plant_id, name, tag, extra: {"id": plant_id, "name": name, **tag, **extra},
    st.sampled_from([2**63 - 1, -2**63, 2**63, -2**63 - 1, 1.0, True]) | st.integers(),
    st.text(max_size=5) | st.none(),
    st.just({}) | st.fixed_dictionaries({"tag": st.text(max_size=5) | st.none() | st.just(1)}),
    st.just({}) | st.fixed_dictionaries({"x": st.integers()}))
bodies = ((objects | new_plants).map(lambda o: json.dumps(o).encode())
          | st.sampled_from([b"", b"[]", b"1", b"{", b'{"a": 1e999}', b"\xff", b" {} "])
          | st.binary(max_size=80))
content_types = st.sampled_from(["application/json", "application/json; charset=utf-8",
                                 "APPLICATION/JSON", "text/plain", None, ""])


@st.composite
def requests(draw):
    """A body and its headers, the length true, false or odd, the stream whole or cut."""
    body = draw(bodies)
    length = draw(st.sampled_from(["true", "none", "odd", "other"]))
    header = {"true": str(len(body)), "none": None,
              "odd": draw(st.sampled_from(["", "+5", " 5", "5 ", "-1", "abc", "٣", "00"])),
              "other": str(draw(st.integers(0, 100)))}[length]
    sent = body[:draw(st.integers(0, len(body)))] if draw(st.booleans()) else body
    return body, sent, header, draw(content_types), draw(st.booleans())


def outcome(read, sent, header, content_type, terminated):
    env = falcon.testing.create_environ(method="POST", path="/plants")
    env["wsgi.input"] = io.BytesIO(sent)
    env.pop("CONTENT_LENGTH", None)
    if header is not None:
        env["CONTENT_LENGTH"] = header
    env.pop("CONTENT_TYPE", None)
    if content_type is not None:
        env["CONTENT_TYPE"] = content_type
    if terminated:
        env["wsgi.input_terminated"] = True
    try:
        return "ok", read(falcon.Request(env), MAX_BODY, "a NewPlant")
    except falcon.HTTPError as exc:
        return exc.status, exc.description


def new_plant_the_long_way(req, max_body, shape):
    try:
        return load_new_plant(read_object(req, max_body, shape))
    except ValidationError as exc:
        return describe(exc)


def new_plant_the_short_way(req, max_body, shape):
    plant = read_new_plant(req, max_body)
    return plant if plant is not None else new_plant_the_long_way(req, max_body, shape)


@SETTINGS
@given(request=requests())
def test_the_new_plant_read_answers_as_read_object_and_the_schema(request):
    """read_new_plant (the create's one-step read, parse and check), then the long way for
    what it leaves, against read_object and load_new_plant alone."""
    _, sent, header, content_type, terminated = request
    short = outcome(new_plant_the_short_way, sent, header, content_type, terminated)
    assert short == outcome(new_plant_the_long_way, sent, header, content_type, terminated)
    if short[0] == "ok" and isinstance(short[1], Plant):
        assert type(short[1]) is Plant


@SETTINGS
@given(document=new_plants | objects, terminated=st.booleans())
def test_the_new_plant_read_of_a_usual_request_answers_as_the_long_way(document, terminated):
    """As above, for the requests the one-step read takes: the length true, JSON, whole."""
    body = json.dumps(document).encode()
    usual = (body, str(len(body)), "application/json", terminated)
    assert (outcome(new_plant_the_short_way, *usual)
            == outcome(new_plant_the_long_way, *usual))


@pytest.mark.parametrize("terminated", [False, True])
@pytest.mark.parametrize("body", [b'{"id": 1, "name": "Fern"}',
                                  b'{"id": 1, "name": "Fern", "tag": "t", "x": [1]}'])
def test_the_usual_create_takes_the_one_step_read(body, terminated):
    env = falcon.testing.create_environ(method="POST", path="/plants", body=body,
                                        headers={"Content-Type": "application/json"})
    if terminated:
        env["wsgi.input_terminated"] = True
    assert read_new_plant(falcon.Request(env), MAX_BODY) == Plant(
        1, "Fern", json.loads(body).get("tag"))


@SETTINGS
@given(plants=st.lists(st.builds(Plant, st.integers(0, 5), st.text(max_size=5),
                                 st.none() | st.text(max_size=5)), max_size=8))
def test_a_creates_answer_is_the_schemas_dump_of_the_stored_plant(plants):
    """on_post dumps the stored plant inline: the same body as PlantSchema's dump, for a new
    plant and for a replay (the stored one answered)."""
    store = MemoryStore()
    client = falcon.testing.TestClient(_app(PlantsResource(store, 1024)))
    for plant in plants:
        sent = {"id": plant.id, "name": plant.name}
        if plant.tag is not None:
            sent["tag"] = plant.tag
        result = client.simulate_post("/plants", json=sent)
        if result.status_code == 200:
            assert result.json == PlantSchema().dump(store.get(plant.id))
            assert result.content == falcon.testing.TestClient(_app(
                _Dumped(store.get(plant.id)))).simulate_get("/").content
        else:
            assert result.status_code == 409


def _app(resource):
    app = falcon.App()
    app.add_route("/plants", resource)
    app.add_route("/", resource)
    return app


def _app_with(*middleware):
    app = falcon.App(middleware=list(middleware))
    app.add_route("/plants", _Dumped(Plant(1, "x", None)))
    return app


class _Dumped:
    """The long way's answer: the schema's dump, as orjson writes it."""

    def __init__(self, plant):
        self._plant = plant

    def on_get(self, req, resp):
        resp.data = orjson.dumps(PlantSchema().dump(self._plant))


_ACCESS = AccessLog(io.StringIO(), "warning", frozenset())
_LOGGED = falcon.testing.TestClient(_app_with(_ACCESS))


@SETTINGS
@given(given_id=st.none() | st.text(max_size=210) | st.from_regex(r"[A-Za-z0-9._:@/+=-]{1,210}",
                                                                   fullmatch=True),
       path=st.sampled_from(["/plants", "/nowhere"]))
def test_the_access_logs_request_id_is_request_ids_own(given_id, path):
    """The access log assigns the request id inline, as the answer leaves: the id
    RequestId.assign gives (the client's when sane, else a new one of this process's), on
    every answer, a 404 too."""
    headers = {} if given_id is None else {"X-Request-ID": given_id}
    env = falcon.testing.create_environ(path=path, headers=headers)
    if "HTTP_X_REQUEST_ID" not in env:  # a header value WSGI cannot carry
        return
    reference = falcon.Response()
    expected = _ACCESS._ids.assign(falcon.Request(env), reference)
    answered = _LOGGED.simulate_get(path, headers=headers).headers["X-Request-ID"]
    if expected == env["HTTP_X_REQUEST_ID"]:  # the client's (as WSGI carries it)
        assert answered == expected
    else:  # made: the next of this process's ids
        prefix, count = answered.rsplit("-", 1)
        assert prefix == _ACCESS._ids.prefix and int(count) == int(expected.rsplit("-")[1]) + 1
