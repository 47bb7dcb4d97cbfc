"""X-Request-ID: taken from the proxy when it is sane, else made here; always echoed.

The access log assigns it as the answer leaves (one middleware step less per request), in
its own ``process_response``, inline: :meth:`RequestId.assign`'s steps, on ``prefix``,
``counter`` and ``SANE`` (tests/unit/http/test_fast_paths.py checks that both agree).

A made id is this process's random prefix and a counter: unique without a system call
per request. A forked child (a pre-fork server's worker) draws a new prefix and starts a new
count; otherwise every worker would hand out its parent's next ids.
"""

import itertools
import re
import secrets
import weakref

import falcon

from plant_store.util import at_fork

HEADER = "X-Request-ID"
ENV_KEY = "HTTP_X_REQUEST_ID"
SANE = re.compile(r"[A-Za-z0-9._:@/+=-]{1,200}")  # a client's id, taken as it is


class RequestId:
    """A request's id: the client's ``X-Request-ID`` when it is a sane one, else a new one;
    echoed on the answer and put in the access line."""

    def __init__(self) -> None:
        self._restart()
        _live.add(self)

    def _restart(self) -> None:
        self.prefix = secrets.token_hex(6)  # this process's; a made id is prefix-count
        self.counter = itertools.count(1)

    def assign(self, req: falcon.Request, resp: falcon.Response) -> str:
        given = req.env.get(ENV_KEY)  # not get_header: a missing header costs it a KeyError
        request_id = given if given and SANE.fullmatch(given) else (
            f"{self.prefix}-{next(self.counter)}")
        resp.set_header(HEADER, request_id)
        return request_id


_live: "weakref.WeakSet[RequestId]" = weakref.WeakSet()


@at_fork.register
def _after_fork_in_child() -> None:
    """A forked worker (gunicorn --preload, say) makes ids of its own."""
    for ids in list(_live):
        ids._restart()
