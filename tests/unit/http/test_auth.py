"""Every operation needs a valid bearer token; failures are 401 in the Error shape."""

import json

import pytest

from support.assertions import assert_error

BODY = json.dumps({"id": 1, "name": "Monstera"})


def post(app, authorization, body=BODY, **kwargs):
    environ = {} if authorization is None else {"HTTP_AUTHORIZATION": authorization}
    # Replace the fixture's default header with this test's (or none at all).
    app.extra_environ = environ
    return app.post("/plants", body, content_type="application/json", status="*", **kwargs)


def test_missing_header_is_401_with_a_bearer_challenge(app):
    response = post(app, None)
    assert_error(response, 401)
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="plant-store"'
    assert len(app.store) == 0


@pytest.mark.parametrize("header", ["Basic dXNlcjpwYXNz", "Token abc", "Bearer", "Bearer   ", ""])
def test_other_scheme_or_empty_token_is_401_without_invalid_token(app, header):
    response = post(app, header)
    assert_error(response, 401)
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="plant-store"'


def test_unknown_token_is_401_with_invalid_token(app):
    response = post(app, "Bearer not-a-real-token")
    assert_error(response, 401)
    assert response.headers["WWW-Authenticate"] == (
        'Bearer realm="plant-store", error="invalid_token"'
    )


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_scheme_name_is_case_insensitive(app, token, scheme):
    assert post(app, f"{scheme} {token}").status_int == 200


def test_unauthenticated_body_is_not_parsed(app):
    """A bad body without a token is a 401, not a 400: the body was never looked at."""
    assert_error(post(app, None, body=b"{not json"), 401)
    assert_error(post(app, "Bearer wrong", body=b"{not json"), 401)


def test_revoked_token_stops_working_without_restart(app, tokens, token):
    assert post(app, f"Bearer {token}").status_int == 200
    tokens.revoke("tests")
    assert_error(post(app, f"Bearer {token}"), 401)


def test_new_token_works_without_restart(app, tokens):
    new = tokens.add("newcomer")
    assert post(app, f"Bearer {new}").status_int == 200


def test_unknown_paths_need_a_token_too(app):
    """No route's existence is revealed to a client without a token."""
    app.extra_environ = {}
    assert_error(app.get("/anything", status="*"), 401)
