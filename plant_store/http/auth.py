"""The bearer-token check, before routing, so an unauthenticated body is never parsed.
A CORS preflight (an ``OPTIONS`` a browser sends before a cross-origin request, without
credentials by design) passes when CORS is on, so Falcon's CORS middleware can answer it."""

from collections.abc import Callable
from typing import Protocol

import falcon

from plant_store.events import Events


class Tokens(Protocol):
    """Where valid tokens are known: :class:`~plant_store.tokens.TokenFile`,
    :class:`~plant_store.tokens.StaticTokens`, or a host application's own."""

    def verify(self, token: str) -> str | None:
        """The token's label when it is valid, else None."""

REALM = 'Bearer realm="plant-store"'
PATHS_KEPT = 1024  # paths whose public check is remembered: the app's few, and some ids


def presented(header: str | None) -> str | None:
    """The token an ``Authorization: Bearer <token>`` header presents, or None."""
    if header is None:
        return None
    # Only HTTP's own whitespace around the token (RFC 9110 5.6.3): str.strip would also
    # take a no-break space or U+0085 off a token (the hostile pass on issue 52).
    scheme, _, token = header.strip(" \t").partition(" ")
    token = token.strip(" \t")
    return token if scheme.lower() == "bearer" and token else None


def verifier(tokens: Tokens) -> Callable[[str | None], bool]:
    """Whether an ``Authorization`` header's token is valid (the server asks before it
    invites a body with ``100 Continue``)."""
    def verifies(header: str | None) -> bool:
        token = presented(header)
        return token is not None and tokens.verify(token) is not None
    return verifies


class BearerAuth:
    """The middleware that lets a request through only with a valid bearer token (public
    paths aside): 401 with ``WWW-Authenticate`` otherwise."""

    def __init__(self, tokens: Tokens, public_paths: frozenset[str],
                 public_prefixes: tuple[str, ...] = (), *, preflight: bool = False,
                 events: Events | None = None) -> None:
        """``preflight``: let CORS preflights through; ``events``: told each 401's reason
        (``refused``: ``missing``, ``scheme`` or ``invalid``), for the metrics."""
        self._verify = tokens.verify
        self._public = public_paths
        self._public_prefixes = public_prefixes
        self._public_of: dict[str, bool] = {}  # path -> public: the check once per path
        self._preflight = preflight
        self._events = events if events is not None else Events()

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        path = req.path
        public = self._public_of.get(path)
        if public is None:
            public = path in self._public or path.startswith(self._public_prefixes)
            if len(self._public_of) < PATHS_KEPT:  # clients choose paths: a bound
                self._public_of[path] = public
        if public:
            return
        if (self._preflight and req.method == "OPTIONS"
                and "HTTP_ACCESS_CONTROL_REQUEST_METHOD" in req.env):
            return
        header = req.env.get("HTTP_AUTHORIZATION")  # get_header would rebuild this name
        if header is None:
            raise self._unauthorized(
                "missing", "An 'Authorization: Bearer <token>' header is required.")
        # The usual header, "Bearer <token>", read here rather than by presented(), which
        # gives the same token (tests/unit/http/test_auth.py) in a call and four steps more.
        token = header[7:].strip(" \t") if header.startswith("Bearer ") else presented(header)
        if not token:
            raise self._unauthorized(
                "scheme", "The Authorization header must use the Bearer scheme.")
        label = self._verify(token)
        if label is None:
            raise self._unauthorized("invalid", "The bearer token is not valid.")
        req.context.token_label = label  # who the client is, for the rate limit

    def _unauthorized(self, reason: str, message: str) -> falcon.HTTPUnauthorized:
        self._events.refused(reason)
        # RFC 6750 section 3: error="invalid_token" only when a token was sent.
        challenge = REALM + (', error="invalid_token"' if reason == "invalid" else "")
        return falcon.HTTPUnauthorized(description=message, challenges=[challenge])
