"""The published document: valid OpenAPI 3.1, served as is, and in step with the schemas."""

import io
import json
import time
import uuid

import jsonschema
import pytest
import webtest
from marshmallow import fields
from openapi_spec_validator import validate
from standardwebhooks import Webhook

from plant_store import __version__
from plant_store.app import create_app
from plant_store.http.schemas import ErrorSchema, JsonInteger, NewPlantSchema, PlantSchema
from plant_store.stores import JsonFileStore
from plant_store.webhooks import worker as webhooks
from support.assertions import assert_error
from support.openapi import DOCUMENT, resolve


def test_document_is_valid_openapi_3_1():
    validate(DOCUMENT)
    assert DOCUMENT["openapi"].startswith("3.1.")
    assert DOCUMENT["info"]["version"] == __version__  # tests/unit/test_version.py
    assert DOCUMENT["info"]["license"]["name"] == "MIT"
    assert DOCUMENT["security"] == [{"bearerAuth": []}]
    assert DOCUMENT["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http", "scheme": "bearer"}


def test_every_status_of_the_contract_is_documented_with_the_error_shape():
    responses = DOCUMENT["paths"]["/plants"]["post"]["responses"]
    assert set(responses) == {"200", "400", "401", "409", "413", "415", "429", "503"}
    for status in ("400", "401", "409", "413", "415", "429", "503"):
        name = responses[status]["$ref"].rsplit("/", 1)[1]
        content = DOCUMENT["components"]["responses"][name]["content"]
        assert list(content) == ["application/json"]
        assert content["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}


def test_document_is_served_without_a_token(app):
    response = app.get("/openapi.json", headers={"Authorization": ""}, status=200)
    assert response.content_type == "application/json"
    assert response.json == {**DOCUMENT, "servers": [{"url": "http://localhost:80"}]}


def describe_field(field: fields.Field) -> dict:
    """What the document must say of a marshmallow field."""
    if isinstance(field, JsonInteger):
        return {"type": "integer", "format": field.format,
                "minimum": field.minimum, "maximum": field.maximum}
    if type(field) is fields.String:
        return {"type": "string"}
    raise AssertionError(f"no OpenAPI mapping for {type(field).__name__}; add one here")


@pytest.mark.parametrize(("name", "schema"), [
    ("Plant", PlantSchema()), ("NewPlant", NewPlantSchema()), ("Error", ErrorSchema()),
])
def test_document_and_schemas_do_not_drift(name, schema):
    documented = resolve({"$ref": f"#/components/schemas/{name}"})
    assert documented["type"] == "object"
    assert set(documented["properties"]) == set(schema.fields)
    assert sorted(documented["required"]) == sorted(
        key for key, field in schema.fields.items() if field.required)
    for key, field in schema.fields.items():
        prop = {k: v for k, v in documented["properties"][key].items() if k != "description"}
        assert prop == describe_field(field), key


def test_health_is_ok_without_a_token(app):
    response = app.get("/health", headers={"Authorization": ""}, status=200)
    assert response.content_type == "application/json"
    assert response.json == {"status": "ok"}


def test_ready_is_503_when_the_store_is_not_usable_and_health_stays_200(
        tmp_path, config, tokens):
    store = JsonFileStore(str(tmp_path / "data"))
    try:
        test_app = webtest.TestApp(create_app(config, store=store, tokens=tokens,
                                                log_stream=io.StringIO()))
        assert test_app.get("/ready").json == {"status": "ready", "version": __version__}
        (tmp_path / "data" / "plants.jsonl").unlink()
        message = assert_error(test_app.get("/ready", status=503), 503)
        assert "plants.jsonl" in message
        assert test_app.get("/health").json == {"status": "ok"}
    finally:
        store.close()


def test_the_webhook_in_the_document_is_the_one_sent():
    hook = DOCUMENT["webhooks"]["newPlant"]["post"]
    sent = webhooks.signed(Webhook(webhooks.new_secret()), uuid.uuid4().hex, b'{"id":1}',
                           int(time.time()))
    documented = {p["name"]: p["schema"] for p in hook["parameters"]}
    assert documented.keys() == sent.keys()
    for name, value in sent.items():
        jsonschema.validate(value, documented[name])
    schema = hook["requestBody"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/NewPlant"}


def operations(document=DOCUMENT):
    """(label, operation) for every operation and webhook."""
    for section in ("paths", "webhooks"):
        for path, item in document[section].items():
            for method, operation in item.items():
                yield f"{method.upper()} {path}", operation


def media_types(document=DOCUMENT):
    """(where, media type object) for every request body and response of the document."""
    for label, operation in operations(document):
        content = operation.get("requestBody", {}).get("content", {})
        yield from ((f"{label} body {kind}", media) for kind, media in content.items())
        for status, response in operation["responses"].items():
            if "$ref" not in response:
                yield from ((f"{label} {status} {kind}", media)
                            for kind, media in response.get("content", {}).items())
    for name, response in document["components"]["responses"].items():
        yield from ((f"{name} {kind}", media) for kind, media in response["content"].items())


def examples(media: dict) -> list:
    return ([media["example"]] if "example" in media else []) + [
        example["value"] for example in media.get("examples", {}).values()]


def test_every_operation_has_a_summary_and_declared_tags():
    declared = [tag["name"] for tag in DOCUMENT["tags"]]
    assert declared == ["plants", "operations"]
    for label, operation in operations():
        assert operation["summary"], label
        assert operation["tags"] and set(operation["tags"]) <= set(declared), label


def test_every_request_body_and_error_response_has_an_example():
    for where, media in media_types():
        is_error = media.get("schema") == {"$ref": "#/components/schemas/Error"}
        if is_error or " body " in where:
            assert examples(media), where


def check_examples(document: dict) -> int:
    """Validate every example against its schema; how many there were."""
    checked = 0
    for where, media in media_types(document):
        for example in examples(media):
            # The components beside the schema, so its #/components/... references resolve.
            schema = {**media["schema"], "components": document["components"]}
            try:
                jsonschema.Draft202012Validator(schema).validate(example)
            except jsonschema.ValidationError as exc:
                raise AssertionError(f"{where}: {exc.message}") from None
            checked += 1
    return checked


def test_every_example_is_valid_against_its_schema():
    # 17 errors, 5 request bodies (two for POST /plants, two for PUT, one for the webhook),
    # 7 answers.
    assert check_examples(DOCUMENT) == 29


def test_an_example_that_breaks_its_schema_is_caught():
    broken = json.loads(json.dumps(DOCUMENT))
    broken["components"]["responses"]["Conflict"]["content"]["application/json"][
        "example"] = {"error": "409", "message": "x"}
    with pytest.raises(AssertionError, match="Conflict application/json: '409' is not"):
        check_examples(broken)
