"""plant_store.serving.server_quirks: each server's quirk undone around the app, so the app
asks no server's name. Over real HTTP: test_serve_granian.py, test_granian_edge.py,
test_body_limit.py (granian's bodies) and test_forwarded_live.py (uWSGI's scheme)."""

import json
import ssl

import falcon.testing

from plant_store.serving.server_quirks import LengthRequired, ServerQuirks
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

    ServerQuirks(app)({"wsgi.url_scheme": "https", "HTTP_X_FORWARDED_SSL": "on"}, None)
    assert seen["wsgi.url_scheme"] == "http" and "HTTP_X_FORWARDED_SSL" not in seen
    ServerQuirks(app)({"wsgi.url_scheme": "https"}, None)  # TLS of its own
    assert seen["wsgi.url_scheme"] == "https"


def test_under_granian_by_hand_the_wsgi_entry_refuses_a_body_without_a_length():
    """The hostile pass on issue 51: ``granian --interface wsgi plant_store.wsgi:application``
    had lost the 411 the adapter's wrapper gives; ServerQuirks (the entry point's wrapper)
    gives it under granian, and only there."""
    app = ServerQuirks(make_app())

    def granian(environ, start_response):
        return app(dict(environ, SERVER_SOFTWARE="Granian"), start_response)

    assert post(granian)[0] == 411
    assert post(granian, chunked=False)[0] == 200
    # Another server: its body is left to it (this test's environ ends no stream: 400).
    assert post(app) == (400, {"error": 400, "message":
                               "The request body is empty; send a NewPlant."})


def test_gunicorn_in_clear_takes_no_scheme_and_no_mount_point_from_a_client():
    """gunicorn without its hooks believes X-Forwarded-Proto and a SCRIPT_NAME header from
    a peer on loopback (the hostile pass on issue 51): undone under gunicorn, its TLS kept."""
    seen = []
    app = ServerQuirks(lambda environ, start_response: seen.append(dict(environ)) or [])
    app({"wsgi.url_scheme": "https", "HTTP_X_FORWARDED_PROTO": "https",
         "gunicorn.socket": object(), "SCRIPT_NAME": "/evil", "PATH_INFO": "/plants"}, None)
    assert seen[-1]["wsgi.url_scheme"] == "http"
    assert (seen[-1]["SCRIPT_NAME"], seen[-1]["PATH_INFO"]) == ("", "/evil/plants")
    tls = ssl.SSLSocket.__new__(ssl.SSLSocket)  # a TLS socket's type, never connected
    app({"wsgi.url_scheme": "https", "HTTP_X_FORWARDED_PROTO": "https",
         "gunicorn.socket": tls, "SCRIPT_NAME": "", "PATH_INFO": "/plants"}, None)
    assert seen[-1]["wsgi.url_scheme"] == "https"  # TLS of gunicorn's own
    app({"wsgi.url_scheme": "https", "HTTP_X_FORWARDED_PROTO": "https"}, None)
    assert seen[-1]["wsgi.url_scheme"] == "https"  # another server's TLS of its own
