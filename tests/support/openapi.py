"""The served OpenAPI document, and its schemas as a validator sees them."""

import importlib.resources
import json

DOCUMENT = json.loads(
    importlib.resources.files("plant_store.http").joinpath("openapi.json").read_text("utf-8"))


def resolve(schema: dict) -> dict:
    """Flatten ``$ref`` and ``allOf`` into one object schema, as a validator would see it."""
    if "$ref" in schema:
        return resolve(DOCUMENT["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]])
    if "allOf" in schema:
        parts = [resolve(part) for part in schema["allOf"]]
        return {
            "type": "object",
            "properties": {k: v for part in parts for k, v in part["properties"].items()},
            "required": [r for part in parts for r in part.get("required", [])],
        }
    return schema
