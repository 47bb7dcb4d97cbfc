"""DELETE /plants/{id}: 204 and gone, 404 for an unknown id, 400 for a non-int64 id."""

import pytest

from plant_store.stores.records import Plant
from support.assertions import assert_error


def test_delete_is_204_without_body_and_the_plant_is_gone(app):
    app.post_json("/plants", {"id": 1, "name": "Fern"}, status=200)
    app.post_json("/plants", {"id": 2, "name": "Palm"}, status=200)
    response = app.delete("/plants/1", status=204)
    assert response.body == b""
    assert app.get("/plants").json == [{"name": "Palm"}]
    assert "id 1" in assert_error(app.delete("/plants/1", expect_errors=True), 404)
    # A deleted id may be created again, with another name.
    assert app.post_json("/plants", {"id": 1, "name": "New"}, status=200).json == {"name": "New"}


@pytest.mark.parametrize("plant_id", [-(2**63), 2**63 - 1, 0, -1])
def test_int64_bounds_are_ids(app, plant_id):
    app.store.create(Plant(plant_id, "edge"))
    app.delete(f"/plants/{plant_id}", status=204)
    assert_error(app.delete(f"/plants/{plant_id}", expect_errors=True), 404)


@pytest.mark.parametrize("plant_id", [
    "abc", "1.0", "1e3", "+1", " 1", "0x10", str(2**63), str(-(2**63) - 1), "1" * 40, "%00",
    "--1", "-",
])
def test_an_id_that_is_not_an_int64_is_400_naming_id(app, plant_id):
    message = assert_error(app.delete(f"/plants/{plant_id}", expect_errors=True), 400)
    # Word for word what POST /plants says of a bad id.
    assert message == "id: Must be an integer from -9223372036854775808 to 9223372036854775807."


def test_delete_needs_the_token(app):
    app.post_json("/plants", {"id": 1, "name": "Fern"}, status=200)
    response = app.delete("/plants/1", extra_environ={"HTTP_AUTHORIZATION": ""},
                          expect_errors=True)
    assert_error(response, 401)
    assert app.get("/plants").json == [{"name": "Fern"}]


def test_other_methods_on_one_plant_are_405_with_allow(app):
    response = app.post("/plants/1", expect_errors=True)
    assert_error(response, 405)
    assert response.headers["Allow"] == "DELETE, GET, HEAD, PUT, OPTIONS"
