"""plant_store.serving.server_quirks: each server's quirk undone around the app, so the app
asks no server's name. Over real HTTP: test_serve_granian.py, test_granian_edge.py,
test_body_limit.py (granian's bodies) and test_forwarded_live.py (uWSGI's scheme)."""

import json

import falcon.testing

from plant_store.serving.server_quirks import LengthRequired, ServerSchemeUndone
from plant_store.testing import TOKEN, make_app

BODY = b'{"id": 1, "name": "Fern"}'


def post(app, token=TOKEN, version="1.1", chunked=True, content_type="application/json"):
    environ = falcon.testing.create_environ(
        "/plants", method="POST", body=BODY, http_version=version,
        headers={"Authorization": f"Bearer {token}", "Content-Type": content_type})
    if chunked:  # as granian hands it: no length
        del environ["CONTENT_LENGTH"]
        environ["HTTP_TRANSFER_ENCODING"] = "chunked"
    answer = {}
    body = b"".join(app(environ, lambda status, headers: answer.update(status=int(status[:3]))))
    return answer["status"], json.loads(body)


def test_a_body_without_a_length_is_refused_411_when_read():
    app = LengthRequired(make_app())
    status, body = post(app)
    assert status == 411 and "Content-Length" in body["message"]
    assert post(app, version="2", chunked=False)[0] == 200  # a length: read
    assert post(app, version="2", chunked=True)[0] == 411


def test_what_the_app_answers_first_is_as_under_any_server():
    app = LengthRequired(make_app())
    assert post(app, token="wrong")[0] == 401
    assert post(app, content_type="text/plain")[0] == 415
    environ = falcon.testing.create_environ("/plants", http_version="2")  # no body to read
    assert b"".join(app(environ, lambda status, headers: None))  # served


def test_a_servers_reading_of_the_scheme_is_undone_before_the_app():
    seen = {}

    def app(environ, start_response):
        seen.update(environ)
        return []

    ServerSchemeUndone(app)({"wsgi.url_scheme": "https", "HTTP_X_FORWARDED_SSL": "on"}, None)
    assert seen["wsgi.url_scheme"] == "http" and "HTTP_X_FORWARDED_SSL" not in seen
    ServerSchemeUndone(app)({"wsgi.url_scheme": "https"}, None)  # TLS of its own
    assert seen["wsgi.url_scheme"] == "https"
