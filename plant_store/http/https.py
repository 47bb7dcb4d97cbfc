"""Bearer tokens travel over TLS only (RFC 6750, section 5.3): what ``require_https`` refuses.

Invariants:

- A request's scheme is the WSGI server's (``wsgi.url_scheme``: https only when the server
  itself speaks TLS), or what a trusted proxy said in ``X-Forwarded-Proto`` or ``Forwarded``
  (:mod:`plant_store.util.forwarded` has applied it by the time this middleware runs, and
  removed what an untrusted peer sent): an untrusted peer's forged header counts for
  nothing, so its request is http.
- :class:`RequireHttps` runs before the token check: a request over plain HTTP is refused
  whatever its ``Authorization`` says, so the answer tells the client nothing about its
  token. The probes (``/health``, ``/ready``) stay plain: an orchestrator probes over
  loopback or a private network, and they carry no token.
"""

import falcon

PROBES = frozenset({"/health", "/ready"})
MESSAGE = ("This service takes requests over HTTPS only (require_https): send it to the "
           "https:// URL. A bearer token sent over plain HTTP can be read on the way; if "
           "this request carried one, revoke it and use a new one.")


class RequireHttps:
    """Falcon middleware: 403 in the Error shape for a request whose scheme is not https,
    but for the probes; put it before the token check."""

    def __init__(self, probes: frozenset[str] = PROBES) -> None:
        self._probes = probes

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.scheme != "https" and req.path not in self._probes:
            raise falcon.HTTPForbidden(description=MESSAGE)
