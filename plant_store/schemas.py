"""NewPlant in, Plant out: the seed's shapes as marshmallow schemas.

Validation is strict where JSON is loose: ``true`` and ``1.0`` are not ids, ``null`` is not
a tag. Unknown fields are allowed by the seed's schema, so they are dropped, not refused.
"""

from typing import Any

from marshmallow import EXCLUDE, Schema, ValidationError, fields, post_dump, post_load

from plant_store.stores import Plant

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class Int64(fields.Field):
    """A JSON integer within int64; bools and floats (even 1.0) are refused."""

    default_error_messages = {  # noqa: RUF012 (marshmallow merges this class attribute)
        "invalid": f"Must be an integer from {INT64_MIN} to {INT64_MAX}.",
    }

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> int:
        if type(value) is not int or not INT64_MIN <= value <= INT64_MAX:
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
    id = Int64(required=True)

    class Meta:
        unknown = EXCLUDE

    @post_load
    def _make_plant(self, data: dict, **kwargs: Any) -> Plant:
        return Plant(data["id"], data["name"], data.get("tag"))


def describe(error: ValidationError) -> str:
    """One sentence naming each bad field, e.g. ``id: Missing data for required field.``"""
    messages = error.messages
    if not isinstance(messages, dict):
        return " ".join(map(str, messages))
    return " ".join(f"{field}: {' '.join(map(str, problems))}" for field, problems in
                    sorted(messages.items()))
