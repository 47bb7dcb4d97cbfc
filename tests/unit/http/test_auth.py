"""Every operation needs a valid bearer token; failures are 401 in the Error shape."""

import json

import falcon
import falcon.testing
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plant_store.http.auth import BearerAuth, presented
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


class _Seen:
    """Tokens that remember what they were asked to verify, and accept it."""

    def __init__(self):
        self.asked = []

    def verify(self, token):
        self.asked.append(token)
        return "label"


HEADERS = st.one_of(
    st.text(st.sampled_from("Bearer bearer\t\x0b\x1c\x85\xa0 xyz=.-"), max_size=20),
    st.builds(lambda scheme, gap, token, tail: scheme + gap + token + tail,
              st.sampled_from(["Bearer", "bearer", "BEARER", "Basic", " Bearer", "Bearer\t"]),
              st.sampled_from(["", " ", "  ", " \t ", "\x85"]),
              st.text(max_size=12),
              st.sampled_from(["", " ", "\t", "\n", "\xa0"])))


@settings(max_examples=500)
@given(HEADERS)
def test_the_usual_headers_token_is_the_one_presented_reads(header):
    """BearerAuth reads ``Bearer <token>`` itself: the token verified, or the 401, is the
    one :func:`presented` gives for any header."""
    tokens = _Seen()
    auth = BearerAuth(tokens, frozenset())
    req = falcon.testing.create_req(path="/plants", method="POST")
    req.env["HTTP_AUTHORIZATION"] = header
    try:
        auth.process_request(req, falcon.Response())
    except falcon.HTTPUnauthorized:
        assert presented(header) is None
    else:
        assert tokens.asked == [presented(header)]


@pytest.mark.parametrize("around", [("", "\xa0"), ("", "\x85"), ("\xa0", ""), ("\x0b", "")])
def test_only_spaces_and_tabs_surround_a_token(app, token, around):
    """The hostile pass on issue 52: str.strip took a no-break space or U+0085 off a token,
    so waitress let such a header through; RFC 9110 allows only spaces and tabs there."""
    before, after = around
    assert_error(post(app, f"Bearer {before}{token}{after}"), 401)
    assert post(app, f"Bearer \t{token} \t").status_int == 200


def test_the_public_check_remembered_per_path_is_bounded_and_answers_as_before(monkeypatch):
    """The public check is made once per path string and remembered for PATHS_KEPT paths;
    past them it is made each time: a client that sends endless paths costs no memory."""
    from plant_store.http import auth

    monkeypatch.setattr(auth, "PATHS_KEPT", 8)
    check = BearerAuth(_NoTokens(), frozenset({"/health"}), ("/docs/",))
    paths = [f"/plants/{n}" for n in range(20)] + ["/health", "/docs/a.css", "/docsx"] * 2
    for path in paths:
        req = falcon.Request(falcon.testing.create_environ(path=path))
        public = path == "/health" or path.startswith("/docs/")
        if public:
            check.process_request(req, falcon.Response())
        else:
            with pytest.raises(falcon.HTTPUnauthorized):
                check.process_request(req, falcon.Response())
    assert len(check._public_of) == 8


class _NoTokens:
    def verify(self, token):
        return None
