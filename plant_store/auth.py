"""The bearer-token check, before routing, so an unauthenticated body is never parsed."""

import falcon

from plant_store.tokens import TokenFile

REALM = 'Bearer realm="plant-store"'


def _unauthorized(message: str, *, invalid_token: bool = False) -> falcon.HTTPUnauthorized:
    challenge = REALM + (', error="invalid_token"' if invalid_token else "")
    return falcon.HTTPUnauthorized(description=message, challenges=[challenge])


class BearerAuth:
    def __init__(self, tokens: TokenFile, public_paths: frozenset[str],
                 public_prefixes: tuple[str, ...] = ()) -> None:
        self._tokens = tokens
        self._public = public_paths
        self._public_prefixes = public_prefixes

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.path in self._public or req.path.startswith(self._public_prefixes):
            return
        header = req.env.get("HTTP_AUTHORIZATION")  # get_header would rebuild this name
        if header is None:
            raise _unauthorized("An 'Authorization: Bearer <token>' header is required.")
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise _unauthorized("The Authorization header must use the Bearer scheme.")
        if self._tokens.verify(token) is None:
            raise _unauthorized("The bearer token is not valid.", invalid_token=True)
