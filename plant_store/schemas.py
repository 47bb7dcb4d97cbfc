"""NewPlant in, Plant out: the seed's shapes as marshmallow schemas.

Validation is strict where JSON is loose: ``true`` and ``1.0`` are not ids, ``null`` is not
a tag. Unknown fields are allowed by the seed's schema, so they are dropped, not refused.
"""

from typing import Any

from marshmallow import EXCLUDE, Schema, ValidationError, fields, post_dump, post_load

from plant_store.stores import Plant


class JsonInteger(fields.Field):
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
    name = fields.String(required=True)
    tag = fields.String()

    @post_dump
    def _omit_missing_tag(self, data: dict, **kwargs: Any) -> dict:
        if data.get("tag") is None:
            data.pop("tag", None)
        return data


class NewPlantSchema(PlantSchema):
    id = JsonInteger(64, required=True)

    class Meta:
        unknown = EXCLUDE

    @post_load
    def _make_plant(self, data: dict, **kwargs: Any) -> Plant:
        return Plant(data["id"], data["name"], data.get("tag"))


class ErrorSchema(Schema):
    error = JsonInteger(32, required=True)
    message = fields.String(required=True)


def describe(error: ValidationError) -> str:
    """One sentence naming each bad field, e.g. ``id: Missing data for required field.``"""
    messages = error.messages
    if not isinstance(messages, dict):
        return " ".join(map(str, messages))
    return " ".join(f"{field}: {' '.join(map(str, problems))}" for field, problems in
                    sorted(messages.items()))
