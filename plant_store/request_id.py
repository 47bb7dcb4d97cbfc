"""X-Request-ID: taken from the proxy when it is sane, else made here; always echoed.

The access log assigns it as a request comes in (one middleware step less per request).

A made id is this process's random prefix and a counter: unique without a system call
per request.
"""

import itertools
import re
import secrets

import falcon

HEADER = "X-Request-ID"
_ENV_KEY = "HTTP_X_REQUEST_ID"
_SANE = re.compile(r"[A-Za-z0-9._:@/+=-]{1,200}")


class RequestId:
    def __init__(self) -> None:
        self._prefix = secrets.token_hex(6)
        self._counter = itertools.count(1)

    def assign(self, req: falcon.Request, resp: falcon.Response) -> str:
        given = req.env.get(_ENV_KEY)  # not get_header: a missing header costs it a KeyError
        request_id = given if given and _SANE.fullmatch(given) else (
            f"{self._prefix}-{next(self._counter)}")
        resp.set_header(HEADER, request_id)
        return request_id
