"""What one server does that the app must not see, undone around the app here, so that the
app and the stores never ask which server runs them (Falcon's request and response absorb
the rest): each quirk is a WSGI wrapper or a hook, applied by that server's entry point
only.

- granian hands the app a body without a ``Content-Length`` as whole even when the
  connection broke or a chunk was bad: :class:`LengthRequired`, by
  :mod:`plant_store.serving.granian_adapter`.
- uWSGI (and gunicorn without its hooks) take a client's ``X-Forwarded-Ssl``, and uWSGI its
  ``X-Forwarded-Proto``, as the scheme itself, from any peer: :class:`ServerSchemeUndone`,
  by :mod:`plant_store.wsgi`, the entry point of both.
- uWSGI forks its workers without Python's fork hooks: :func:`at_fork_under_uwsgi` runs
  the at-fork registry (:mod:`plant_store.util.at_fork`) after each of its forks.
"""

from collections.abc import Callable, Iterable
from typing import Any, NoReturn

import falcon

from plant_store.util import at_fork

WSGIApp = Callable[..., Iterable[bytes]]

LENGTH_REQUIRED = ("Send the body with a Content-Length: under this server a body without "
                   "one cannot be told whole from cut short; nothing was done.")


class _Unreadable:
    """A body that cannot be trusted whole: any read refuses it, 411 in the Error shape."""

    def read(self, size: int = -1) -> NoReturn:
        raise falcon.HTTPLengthRequired(description=LENGTH_REQUIRED)

    readline = read

    def __iter__(self) -> NoReturn:
        self.read()


_UNREADABLE = _Unreadable()


class LengthRequired:
    """granian's bodies: one without a ``Content-Length`` (chunked, or any over HTTP/2) is
    refused 411 when the app reads it, as granian hands the app what arrived before a
    broken connection or a bad chunk as if it were the whole body (the hostile pass on
    issue 42): only a length tells. Refused at the read, not before, so what the app
    answers first (401, 415, 413 for a length) is as under any server, and a request whose
    body nobody reads is served. An HTTP/1 request with neither header has no body."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not environ.get("CONTENT_LENGTH") and (
                environ.get("HTTP_TRANSFER_ENCODING")
                or not environ.get("SERVER_PROTOCOL", "").startswith("HTTP/1")):
            environ["wsgi.input"] = _UNREADABLE
            environ["wsgi.input_terminated"] = True  # read it, not a length of 0
        return self.app(environ, start_response)


def undo_server_scheme(environ: dict[str, Any]) -> None:
    """uWSGI takes a client's ``X-Forwarded-Ssl: on``, and its ``X-Forwarded-Proto: https``,
    as the scheme itself, from any peer, before any app could judge it: undo that (TLS of
    uWSGI's own sets ``HTTPS``), so only a trusted proxy's ``X-Forwarded-Proto`` or
    ``Forwarded`` says https (:class:`~plant_store.util.forwarded.ForwardedHeaders` reads
    the header, which stays). The second only under uWSGI (``uwsgi.version`` in the
    environ): another server's TLS of its own says https without ``HTTPS``."""
    forged_ssl = environ.pop("HTTP_X_FORWARDED_SSL", None) is not None
    forged_proto = "HTTP_X_FORWARDED_PROTO" in environ and "uwsgi.version" in environ
    if (forged_ssl or forged_proto) and "HTTPS" not in environ:
        environ["wsgi.url_scheme"] = "http"


class ServerSchemeUndone:
    """``app`` with :func:`undo_server_scheme` applied first, for the servers that load
    :mod:`plant_store.wsgi` (uWSGI, gunicorn, mod_wsgi): a request without either header
    costs one look-up each."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        if "HTTP_X_FORWARDED_SSL" in environ or "HTTP_X_FORWARDED_PROTO" in environ:
            undo_server_scheme(environ)
        return self.app(environ, start_response)


def at_fork_under_uwsgi() -> None:
    """Under uWSGI with its master, the at-fork registry runs in each worker it forks (its
    forks run no Python fork hooks); elsewhere nothing (Python's own hooks run it; without
    a master, whose ``uwsgidecorators`` refuses to load, the JSON-file store still refuses
    a write in a worker forked after it was opened: :class:`plant_store.util.at_fork.Owner`)."""
    try:
        import uwsgi  # only inside uWSGI
    except ImportError:
        return
    if uwsgi.masterpid():
        from uwsgidecorators import postfork

        postfork(at_fork.catch_up)
