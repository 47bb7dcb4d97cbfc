"""What one server does that the app must not see, undone around the app here, so that the
app and the stores never ask which server runs them (Falcon's request and response absorb
the rest): each quirk is a WSGI wrapper or a hook, applied by that server's entry point
only.

- granian hands the app a body without a ``Content-Length`` as whole even when the
  connection broke or a chunk was bad: :class:`LengthRequired`, by
  :mod:`plant_store.serving.granian_adapter`, and by :class:`ServerQuirks` when granian
  runs :mod:`plant_store.wsgi` itself (``granian --interface wsgi``).
- uWSGI (and gunicorn without its hooks) take a client's ``X-Forwarded-Ssl``, uWSGI its
  ``X-Forwarded-Proto`` from any peer, gunicorn its ``X-Forwarded-Proto`` and
  ``SCRIPT_NAME`` headers from a peer on loopback: :class:`ServerQuirks`, by
  :mod:`plant_store.wsgi`, the entry point of all of them.

:class:`ServerQuirks` tells the server from what it writes into the environ
(``SERVER_SOFTWARE``, ``uwsgi.version``, ``gunicorn.socket``), here in ``serving/``, so the
app never has to.
- uWSGI forks its workers without Python's fork hooks: :func:`at_fork_under_uwsgi` runs
  the at-fork registry (:mod:`plant_store.util.at_fork`) after each of its forks.
"""

import os
import ssl
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
        if not environ.get("CONTENT_LENGTH"):
            unreadable_without_length(environ)
        return self.app(environ, start_response)


def unreadable_without_length(environ: dict[str, Any]) -> None:
    """:class:`LengthRequired`'s step, for a request without a ``Content-Length`` (for a
    caller that has looked at it already: granian's worker front)."""
    if environ.get("HTTP_TRANSFER_ENCODING") or not environ.get(
            "SERVER_PROTOCOL", "").startswith("HTTP/1"):
        environ["wsgi.input"] = _UNREADABLE
        environ["wsgi.input_terminated"] = True  # read it, not a length of 0


def undo_server_scheme(environ: dict[str, Any]) -> None:
    """uWSGI takes a client's ``X-Forwarded-Ssl: on``, and its ``X-Forwarded-Proto: https``,
    as the scheme itself, from any peer, before any app could judge it; gunicorn without its
    hooks takes ``X-Forwarded-Proto`` from any peer on loopback (its default
    ``forwarded_allow_ips``), a local proxy that passes the client's header along included.
    Undo that (TLS of the server's own sets ``HTTPS`` under uWSGI, and is a TLS socket under
    gunicorn), so only a trusted proxy's ``X-Forwarded-Proto`` or ``Forwarded`` says https
    (:class:`~plant_store.util.forwarded.ForwardedHeaders` reads the header, which stays).
    Under another server, whose TLS of its own says https without ``HTTPS``, only
    ``X-Forwarded-Ssl`` is undone."""
    forged_ssl = environ.pop("HTTP_X_FORWARDED_SSL", None) is not None
    forged_proto = ("HTTP_X_FORWARDED_PROTO" in environ or "HTTP_X_FORWARDED_PROTOCOL" in environ
                    ) and ("uwsgi.version" in environ or _gunicorn_in_clear(environ))
    if (forged_ssl or forged_proto) and "HTTPS" not in environ:
        environ["wsgi.url_scheme"] = "http"


def _gunicorn_in_clear(environ: dict[str, Any]) -> bool:
    sock = environ.get("gunicorn.socket")
    return sock is not None and not isinstance(sock, ssl.SSLSocket)


class ServerQuirks:
    """``app`` with every server's quirk undone, each only under the server that has it,
    for the servers that load :mod:`plant_store.wsgi` (uWSGI, gunicorn, granian by hand,
    mod_wsgi): a request with none of the headers at stake costs a few look-ups."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app
        self._length_required = LengthRequired(app)
        # gunicorn takes a SCRIPT_NAME header from a peer it trusts; the process's own
        # SCRIPT_NAME (its documented way to mount the app) stays what it says.
        self._script_name = os.environ.get("SCRIPT_NAME", "")

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        if ("HTTP_X_FORWARDED_SSL" in environ or "HTTP_X_FORWARDED_PROTO" in environ
                or "HTTP_X_FORWARDED_PROTOCOL" in environ):
            undo_server_scheme(environ)
        if "gunicorn.socket" in environ and (
                (script_name := environ.get("SCRIPT_NAME", "")) != self._script_name):
            # What the header cut off the path goes back on it: the path as sent.
            own = self._script_name if script_name.startswith(self._script_name) else ""
            environ["PATH_INFO"] = script_name[len(own):] + environ.get("PATH_INFO", "")
            environ["SCRIPT_NAME"] = own
        if environ.get("SERVER_SOFTWARE") == "Granian":
            return self._length_required(environ, start_response)
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


def may_start_threads() -> bool:
    """Whether this process may start a thread now: not a uWSGI process that will fork its
    workers (its master, or its first process, without ``--lazy-apps``). uWSGI forks from
    C without taking the GIL first, so a thread of this process that held it at a fork
    left that worker waiting for it forever (the log queue's writer did: the hostile pass
    on issue 52's third round)."""
    try:
        import uwsgi  # only inside uWSGI
    except ImportError:
        return True
    return bool(uwsgi.worker_id() > 0)  # imported in a worker: --lazy-apps
