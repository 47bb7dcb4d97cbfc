"""Every error leaves as the seed's Error shape: ``{"error": <status>, "message": "..."}``."""

import logging
from typing import Any

import falcon
import orjson

from plant_store.http.schemas import ErrorSchema

log = logging.getLogger("plant_store.errors")  # the name users filter on
_dump = ErrorSchema().dump
INTERNAL = "The server failed to handle the request; the details are in its log."
TOO_LARGE = "The request body is larger than the limit of {} bytes."


def serialize(req: falcon.Request, resp: falcon.Response, error: falcon.HTTPError) -> None:
    """Error serializer: JSON whatever the client accepts, with a plain-sentence message."""
    resp.content_type = falcon.MEDIA_JSON
    resp.data = document(error.status_code, _message(req, error))


def document(status: int, message: str) -> bytes:
    """The Error body; waitress's own errors use it too (``waitress_adapter``)."""
    return orjson.dumps(_dump({"error": status, "message": message}))


def _message(req: falcon.Request, error: falcon.HTTPError) -> str:
    if error.description:
        return error.description
    if error.status_code == 404:
        return f"There is nothing at {req.path}."
    if error.status_code == 405:
        return f"{req.method} is not allowed on {req.path}; see the Allow header."
    return f"{error.title}."


def unexpected(
    req: falcon.Request, resp: falcon.Response, exc: Exception, params: dict[str, Any],
) -> None:
    """Handler for anything unforeseen: the traceback goes to the log, not to the client."""
    log.exception("unhandled error in %s %s", req.method, req.path)
    raise falcon.HTTPInternalServerError(description=INTERNAL)
