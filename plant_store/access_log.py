"""One access line per request: method, path, status, duration; never headers or body."""

import logging
import time

import falcon

log = logging.getLogger("plant_store.access")


class AccessLog:
    def __init__(self, quiet_paths: frozenset[str] = frozenset()) -> None:
        self._quiet = quiet_paths  # logged at debug, not info

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.started = time.perf_counter()

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, succeeded: bool
    ) -> None:
        level = logging.DEBUG if req.path in self._quiet else logging.INFO
        if log.isEnabledFor(level):
            elapsed_ms = (time.perf_counter() - req.context.started) * 1000
            log.log(
                level, "%s %s %s %s %.1fms",
                req.remote_addr, req.method, req.path, resp.status_code, elapsed_ms,
            )
