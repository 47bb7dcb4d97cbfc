"""NewPlant in, Plant out: the seed's shapes as marshmallow schemas.

Validation is strict where JSON is loose: ``true`` and ``1.0`` are not ids, ``null`` is not
a tag. Unknown fields are allowed by the seed's schema, so they are dropped, not refused.
"""

import re
from typing import Any, cast

import orjson
from marshmallow import EXCLUDE, Schema, ValidationError, fields, post_dump, post_load

from plant_store.http.json_fallback import reparse
from plant_store.stores.records import Plant, plant_fields


class JsonInteger(fields.Field[int]):
    """A JSON integer within a signed ``bits``-bit range; bools and floats (even 1.0) are
    refused, since a number with a fraction went through floating point and may have changed.
    """

    def __init__(self, bits: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.format = f"int{bits}"
        self.minimum, self.maximum = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        self.error_messages = {
            **self.error_messages,
            "invalid": f"Must be an integer from {self.minimum} to {self.maximum}.",
        }

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> int:
        if type(value) is not int or not self.minimum <= value <= self.maximum:
            raise self.make_error("invalid")
        return value


class PlantSchema(Schema):
    """The Plant as the API answers it: name, and tag when there is one; never the id."""

    name = fields.String(required=True)
    tag = fields.String()

    @post_dump
    def _omit_missing_tag(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if data.get("tag") is None:
            data.pop("tag", None)
        return data


class NewPlantSchema(PlantSchema):
    """A NewPlant as a client sends it: an int64 id, a name, an optional tag (a string)."""

    id = JsonInteger(64, required=True)

    class Meta:
        unknown = EXCLUDE

    @post_load
    def _make_plant(self, data: dict[str, Any], **kwargs: Any) -> Plant:
        return Plant(data["id"], data["name"], data.get("tag"))


class PlantUpdateSchema(PlantSchema):
    """A PUT's body: a Plant, with the optional ``id`` that a client sends back as it
    created it (it must name the plant in the path)."""

    id = JsonInteger(64)

    class Meta:
        unknown = EXCLUDE


class ErrorSchema(Schema):
    """The Error shape of every refusal: the status as an integer, and a sentence."""

    error = JsonInteger(32, required=True)
    message = fields.String(required=True)


_new_plant = NewPlantSchema()
_plant_update = PlantUpdateSchema()
_new_tuple = tuple.__new__  # a Plant built in C; the named tuple's own __new__ is Python
_ID = cast(JsonInteger, _new_plant.fields["id"])
ID_MIN, ID_MAX = _ID.minimum, _ID.maximum  # a NewPlant's id, at least and at most
_ID_TEXT = re.compile(r"-?[0-9]{1,19}")  # ASCII digits: no '+1', ' 1', '1_000', no Arabic-Indic
ID_RULE = cast(str, _ID.error_messages["invalid"])  # the words for a bad id, in a body or elsewhere


def id_from_text(text: str) -> int | None:
    """An id written in a path or on a command line, held to a body's rule for ``id``;
    None when it is not one."""
    number = int(text) if _ID_TEXT.fullmatch(text) else None
    return number if number is not None and _ID.minimum <= number <= _ID.maximum else None


def load_new_plant(document: dict[str, Any]) -> Plant:
    """``NewPlantSchema().load``, with the plainly valid document, the usual one, built
    without marshmallow's machinery (most of the service's own time per request).

    Only a document whose fields already have exactly the schema's types takes the short
    way; anything else, every error included, goes through the schema.
    tests/unit/http/test_schema_properties.py checks that both ways agree on any JSON object.
    """
    plant_id, name, tag = document.get("id"), document.get("name"), document.get("tag", "")
    if (type(plant_id) is int and _ID.minimum <= plant_id <= _ID.maximum
            and type(name) is str and type(tag) is str):
        return _new_tuple(Plant, (plant_id, name, document.get("tag")))
    plant: Plant = _new_plant.load(document)  # the schema's post_load makes a Plant
    return plant


def load_plant_update(document: dict[str, Any], plant_id: int) -> Plant:
    """A PUT body for the plant ``plant_id``, as that Plant; ValidationError naming ``id``
    when the body names another plant."""
    data = _plant_update.load(document)
    if data.get("id", plant_id) != plant_id:
        raise ValidationError({"id": [f"Must be the id in the path, {plant_id}, or absent."]})
    return Plant(plant_id, data["name"], data.get("tag"))


def dump_plant(plant: Plant) -> dict[str, Any]:
    """``PlantSchema().dump`` for the one object it is given, a stored Plant, without
    marshmallow's machinery; tests/unit/http/test_schema_properties.py checks that both agree."""
    return plant_fields(plant, with_id=False)


def describe(error: ValidationError) -> str:
    """One sentence naming each bad field, e.g. ``id: Missing data for required field.``"""
    messages = error.messages
    if not isinstance(messages, dict):
        return " ".join(map(str, messages))
    return " ".join(f"{field}: {' '.join(map(str, problems))}" for field, problems in
                    sorted(messages.items()))


class NotAnObject(ValueError):
    """Why a body holds no JSON object, said so that "The request body is ..." (an API
    request's) or "line N: ..." (an import's) can precede it."""


def json_object(body: bytes, shape: str) -> dict[str, Any]:
    """The JSON object ``body`` holds, read as strictly for an import's line as for a
    request's body: orjson, then the slower parse for what only it refuses (a number beyond
    a double, which the schema then names). ``shape`` names the object expected."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        try:
            document = reparse(body, exc)
        except ValueError as refused:  # orjson's depth limit, or the fallback's (the same)
            deep = "nested too deeply" in str(refused)
            raise NotAnObject("nested deeper than 1024 levels" if deep
                              else "not valid UTF-8 JSON") from None
    if not isinstance(document, dict):
        raise NotAnObject(f"not a JSON object ({shape})")
    return document
