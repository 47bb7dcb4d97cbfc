"""The /plants resource: read the body, load a NewPlant, store it, dump the Plant."""

import falcon
import orjson
from marshmallow import ValidationError

from plant_store.schemas import describe, dump_plant, load_new_plant
from plant_store.stores import Conflict, Store, StoreUnavailable


class PlantsResource:
    def __init__(self, store: Store, max_body_size: int) -> None:
        self._store = store
        self._max_body = max_body_size

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        plant = self._load_new_plant(req)
        try:
            stored, _ = self._store.create(plant)
        except Conflict as exc:
            raise falcon.HTTPConflict(
                description=f"A plant with id {exc.stored.id} exists with a different name or tag."
            ) from None
        except StoreUnavailable:
            raise falcon.HTTPServiceUnavailable(
                description="The store cannot save plants right now; the plant was not created."
            ) from None
        resp.data = orjson.dumps(dump_plant(stored))
        resp.content_type = falcon.MEDIA_JSON

    def _load_new_plant(self, req: falcon.Request):
        mimetype = (req.content_type or "").partition(";")[0].strip().lower()
        if mimetype != falcon.MEDIA_JSON:
            raise falcon.HTTPUnsupportedMediaType(
                description="The request body must be sent as Content-Type: application/json."
            )
        if req.content_length is not None and req.content_length > self._max_body:
            raise _too_large(self._max_body)
        # A server that dechunks without a Content-Length says so (PEP 3333 extension).
        stream = req.stream if req.env.get("wsgi.input_terminated") else req.bounded_stream
        body = stream.read(self._max_body + 1)
        if len(body) > self._max_body:
            raise _too_large(self._max_body)
        if not body:
            raise falcon.HTTPBadRequest(description="The request body is empty; send a NewPlant.")
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise falcon.HTTPBadRequest(
                description="The request body is not valid UTF-8 JSON."
            ) from None
        if not isinstance(document, dict):
            raise falcon.HTTPBadRequest(
                description="The request body must be a JSON object (a NewPlant)."
            )
        try:
            return load_new_plant(document)
        except ValidationError as exc:
            raise falcon.HTTPBadRequest(description=describe(exc)) from None


def _too_large(limit: int) -> falcon.HTTPContentTooLarge:
    return falcon.HTTPContentTooLarge(
        description=f"The request body is larger than the limit of {limit} bytes."
    )
