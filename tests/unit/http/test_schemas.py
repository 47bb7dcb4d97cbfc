"""Property tests of the schema layer, with the published document as the judge of valid."""

import json

import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from marshmallow import ValidationError

from plant_store.http.schemas import NewPlantSchema, PlantSchema, dump_plant, load_new_plant
from plant_store.stores.records import Plant
from support.assertions import assert_error
from support.openapi import DOCUMENT, resolve

NEW_PLANT = resolve({"$ref": "#/components/schemas/NewPlant"})
FIELD_VALIDATORS = {
    key: jsonschema.Draft202012Validator(prop) for key, prop in NEW_PLANT["properties"].items()
}
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# The fixtures are per test, not per example; every example below leaves no state behind
# that the next one could trip on (a fresh id per example, or nothing stored at all).
SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

new_plants = (
    schemathesis.openapi.from_dict(DOCUMENT)["/plants"]["POST"].as_strategy()
    .map(lambda case: case.body)
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)


@SETTINGS
@given(body=new_plants)
def test_any_valid_new_plant_loads_and_dumps_back_without_id(body):
    # JSON Schema counts 1.0 as an integer; the contract refuses it (see JsonInteger).
    assume(type(body["id"]) is int)
    plant = NewPlantSchema().load(body)
    assert (plant.id, plant.name, plant.tag) == (body["id"], body["name"], body.get("tag"))
    dumped = PlantSchema().dump(plant)
    assert dumped == {key: body[key] for key in ("name", "tag") if key in body}


@SETTINGS
@given(field=st.sampled_from(sorted(FIELD_VALIDATORS)), value=json_values)
def test_any_value_the_document_calls_invalid_is_400_naming_the_field(app, field, value):
    assume(not FIELD_VALIDATORS[field].is_valid(value))
    body = {"id": 7, "name": "Fern", "tag": "polypod", field: value}
    response = app.post("/plants", json.dumps(body, allow_nan=False),
                        content_type="application/json", status="*")
    assert assert_error(response, 400).startswith(f"{field}:")
    assert len(app.store) == 0


@pytest.mark.parametrize("field", sorted(NEW_PLANT["required"]))
def test_a_missing_required_field_is_400_naming_it(app, field):
    body = {"id": 7, "name": "Fern"}
    del body[field]
    response = app.post("/plants", json.dumps(body, allow_nan=False),
                        content_type="application/json", status="*")
    assert assert_error(response, 400).startswith(f"{field}:")


@SETTINGS
@given(plant_id=st.integers(INT64_MIN - 2**70, INT64_MAX + 2**70)
       | st.sampled_from([INT64_MIN - 1, INT64_MIN, INT64_MAX, INT64_MAX + 1]))
def test_int64_bounds_are_exact(plant_id):
    errors = NewPlantSchema().validate({"id": plant_id, "name": "x"})
    assert (errors == {}) == (INT64_MIN <= plant_id <= INT64_MAX)


@pytest.mark.parametrize(("inside", "outside"), [
    (INT64_MIN, INT64_MIN - 1), (INT64_MAX, INT64_MAX + 1)])
def test_the_document_and_the_schema_agree_on_the_bounds(inside, outside):
    assert FIELD_VALIDATORS["id"].is_valid(inside)
    assert not FIELD_VALIDATORS["id"].is_valid(outside)
    assert NewPlantSchema().validate({"id": inside, "name": "x"}) == {}
    assert "id" in NewPlantSchema().validate({"id": outside, "name": "x"})


def through_marshmallow(document):
    try:
        return NewPlantSchema().load(document)
    except ValidationError as exc:
        return exc.messages


def through_short_way(document):
    try:
        return load_new_plant(document)
    except ValidationError as exc:
        return exc.messages


@SETTINGS
@given(document=st.dictionaries(st.sampled_from(["id", "name", "tag", "other"]), json_values)
       | new_plants)
def test_the_short_way_loads_exactly_as_the_schema(document):
    assert through_short_way(document) == through_marshmallow(document)


@SETTINGS
@given(plant_id=st.integers(INT64_MIN, INT64_MAX), name=st.text(),
       tag=st.none() | st.text())
def test_the_short_way_dumps_exactly_as_the_schema(plant_id, name, tag):
    plant = Plant(plant_id, name, tag)
    assert dump_plant(plant) == PlantSchema().dump(plant)
