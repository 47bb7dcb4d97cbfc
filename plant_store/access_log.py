"""One access line per request: method, path, status, duration; never headers or body."""

import logging
import time

import falcon

log = logging.getLogger("plant_store.access")


class AccessLog:
    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.started = time.perf_counter()

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, succeeded: bool
    ) -> None:
        if log.isEnabledFor(logging.INFO):
            elapsed_ms = (time.perf_counter() - req.context.started) * 1000
            log.info(
                "%s %s %s %s %.1fms",
                req.remote_addr, req.method, req.path, resp.status_code, elapsed_ms,
            )
