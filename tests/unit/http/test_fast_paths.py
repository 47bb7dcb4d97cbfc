"""Each fast path of a create against the path it shortcuts, on any input: the same result,
or the same refusal (status and words)."""

import io
import json

import falcon
import falcon.testing
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plant_store.http.plants import read_object, read_plain_object

MAX_BODY = 64
SETTINGS = settings(max_examples=400, deadline=None)

objects = st.dictionaries(st.sampled_from(["id", "name", "tag", "x"]),
                          st.integers() | st.text(max_size=5) | st.none(), max_size=4)
bodies = (objects.map(lambda o: json.dumps(o).encode())
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


@SETTINGS
@given(request=requests())
def test_the_plain_read_answers_as_read_object(request):
    _, sent, header, content_type, terminated = request
    assert (outcome(read_plain_object, sent, header, content_type, terminated)
            == outcome(read_object, sent, header, content_type, terminated))


@pytest.mark.parametrize("terminated", [False, True])
def test_the_usual_create_takes_the_plain_read(terminated):
    body = b'{"id": 1, "name": "Fern"}'
    assert outcome(read_plain_object, body, str(len(body)), "application/json",
                   terminated) == ("ok", {"id": 1, "name": "Fern"})
