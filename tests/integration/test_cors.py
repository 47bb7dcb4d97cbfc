"""CORS, off by default: with ``cors_allow_origins`` set, Falcon's CORS middleware answers
a browser's preflight before the token check, and marks real cross-origin answers (refusals
too) readable by the origins allowed; other origins get no CORS headers. Over real HTTP."""

from support.servers import Server

ORIGIN = "https://garden.example"
PREFLIGHT = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type"}


def headers_of(answer):
    return {k.lower(): v for k, v in answer[1].items()}


def test_a_preflight_is_answered_without_a_token_and_a_real_request_is_readable(tmp_path):
    with Server(tmp_path, "--cors-allow-origins", f"{ORIGIN} http://localhost:3000") as server:
        token = server.first_token
        preflight = server.request("OPTIONS", "/plants", headers=PREFLIGHT)
        assert preflight[0] == 200
        got = headers_of(preflight)
        assert got["access-control-allow-origin"] == ORIGIN
        assert "POST" in got["access-control-allow-methods"]
        assert got["access-control-allow-headers"] == "authorization, content-type"

        created = server.request("POST", "/plants", {"id": 1, "name": "Fern"}, token,
                                 headers={"Origin": ORIGIN})
        assert created[0] == 200 and created[2] == {"name": "Fern"}
        got = headers_of(created)
        assert got["access-control-allow-origin"] == ORIGIN
        assert "X-Request-ID" in got["access-control-expose-headers"]
        assert "Link" in got["access-control-expose-headers"]

        refused = server.request("GET", "/plants", headers={"Origin": ORIGIN})
        assert refused[0] == 401  # the token is still needed; the page can read why
        assert headers_of(refused)["access-control-allow-origin"] == ORIGIN

        # An OPTIONS that is not a preflight still needs the token.
        assert server.request("OPTIONS", "/plants", headers={"Origin": ORIGIN})[0] == 401


def test_another_origin_gets_no_cors_headers(tmp_path):
    with Server(tmp_path, "--cors-allow-origins", ORIGIN) as server:
        token = server.first_token
        answer = server.request("GET", "/plants", token=token,
                                headers={"Origin": "https://evil.example"})
        assert answer[0] == 200
        assert "access-control-allow-origin" not in headers_of(answer)


def test_cors_is_off_by_default(tmp_path):
    with Server(tmp_path) as server:
        preflight = server.request("OPTIONS", "/plants", headers=PREFLIGHT)
        assert preflight[0] == 401
        assert "access-control-allow-origin" not in headers_of(preflight)


def test_answers_vary_by_origin_and_origins_match_as_browsers_send_them(tmp_path):
    with Server(tmp_path, "--cors-allow-origins", "HTTPS://Garden.Example:443") as server:
        answer = server.request("GET", "/health", headers={"Origin": ORIGIN})
        other = server.request("GET", "/health", headers={"Origin": "https://elsewhere.example"})
    assert headers_of(answer)["access-control-allow-origin"] == ORIGIN
    assert headers_of(answer)["vary"] == "Origin"
    assert "access-control-allow-origin" not in headers_of(other)
    assert headers_of(other)["vary"] == "Origin"  # a cache must not reuse it for ORIGIN
