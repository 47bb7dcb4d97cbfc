"""Errors outside the POST table still come back in the Error shape."""

import io

import webtest

from plant_store.app import create_app
from plant_store.stores import MemoryStore, StoreUnavailable
from support.assertions import assert_error


def test_unknown_path_is_404(app):
    message = assert_error(app.get("/nope", status="*"), 404)
    assert "/nope" in message


def test_wrong_method_is_405_with_allow(app):
    response = app.put("/plants", status="*")
    assert_error(response, 405)
    assert {"GET", "POST"} <= set(response.headers["Allow"].replace(" ", "").split(","))
    assert_error(app.delete("/plants", status="*"), 405)


def test_error_shape_whatever_the_client_accepts(app):
    response = app.get("/nope", headers={"Accept": "application/xml"}, status="*")
    assert_error(response, 404)


class BrokenStore(MemoryStore):
    def __init__(self, error):
        super().__init__()
        self.error = error

    def create(self, plant, webhooks=()):
        raise self.error


def broken_app(config, tokens, token, error):
    return webtest.TestApp(
        create_app(config, store=BrokenStore(error), tokens=tokens,
                   log_stream=io.StringIO()),
        extra_environ={"HTTP_AUTHORIZATION": f"Bearer {token}"},
    )


def test_unexpected_error_is_500_without_internals(config, tokens, token, caplog):
    app = broken_app(config, tokens, token, RuntimeError("secret internal detail"))
    response = app.post_json("/plants", {"id": 1, "name": "x"}, status="*")
    message = assert_error(response, 500)
    assert "secret" not in message and "Traceback" not in response.text
    assert "secret internal detail" in caplog.text  # the traceback went to the log


def test_store_unavailable_is_503(config, tokens, token):
    app = broken_app(config, tokens, token, StoreUnavailable("disk full"))
    message = assert_error(app.post_json("/plants", {"id": 1, "name": "x"}, status="*"), 503)
    assert "not created" in message


