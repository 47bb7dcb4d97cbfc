"""The /plants resources: create (a NewPlant in, the Plant out), list (pages of Plants),
and delete one plant by id."""

import re
from collections.abc import Callable

import falcon
import orjson
from marshmallow import ValidationError

from plant_store.http import errors
from plant_store.http.forwarded import base_url
from plant_store.http.json_fallback import reparse
from plant_store.http.schemas import (
    ID_RULE,
    JsonInteger,
    describe,
    dump_plant,
    id_from_text,
    load_new_plant,
)
from plant_store.stores import Conflict, Plant, Store, StoreUnavailable

INT32_MAX = JsonInteger(32).maximum  # the bounds the schemas use
_LIMIT = re.compile(r"[0-9]{1,10}")
_LIMIT_RULE = f"Must be an integer from 1 to {INT32_MAX}."
_CURSOR = re.compile(r"[0-9]{1,18}")
# A 503 says "not done" only when that is known; otherwise that the outcome is unknown,
# and how to learn it: the same create again is safe (a replay answers 200 once stored).
CREATE_NOT_DONE = "The store cannot save plants right now; the plant was not created."
CREATE_UNKNOWN = ("The store did not confirm the create in time; the plant may have been "
                  "created. Send the same request again: it is safe, and answers 200 once "
                  "the plant is stored.")
DELETE_NOT_DONE = "The store cannot delete plants right now; the plant was kept."
DELETE_UNKNOWN = ("The store did not confirm the delete in time; the plant may have been "
                  "deleted. Send the same request again: 404 then means it is gone.")


class PlantsResource:
    def __init__(
        self, store: Store, max_body_size: int, page_size: int = 100, max_page_size: int = 1000,
        webhooks: tuple[str, ...] = (), on_created: Callable[[], None] | None = None,
        on_unavailable: Callable[[str, StoreUnavailable], None] = lambda op, exc: None,
    ) -> None:
        """``on_unavailable(operation, exc)``: told each 503 the store caused (metrics)."""
        self._store = store
        self._on_unavailable = on_unavailable
        self._max_body = max_body_size
        self._page_size = page_size
        self._max_page = max_page_size
        self._webhooks = webhooks  # each create owes each of these a delivery
        self._on_created = on_created

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        unknown = sorted(set(req.params) - {"limit", "cursor"})
        if unknown:
            raise falcon.HTTPBadRequest(
                description=f"{unknown[0]}: Not a parameter here; use limit and cursor.")
        given = _query(req, "limit", _LIMIT, _LIMIT_RULE)
        limit = self._page_size if given is None else int(given)
        if not 1 <= limit <= INT32_MAX:
            raise _bad_param("limit", _LIMIT_RULE)
        cursor = _query(req, "cursor", _CURSOR, "Must be a cursor from a Link header.")
        start = 0 if cursor is None else int(cursor)
        try:
            plants, after = self._store.page(start, min(limit, self._max_page))
        except StoreUnavailable as exc:
            self._on_unavailable("list", exc)
            raise falcon.HTTPServiceUnavailable(
                description="The store cannot list plants right now.") from None
        if after is not None:
            resp.append_link(f"{base_url(req)}{req.path}?limit={limit}&cursor={after}", "next")
        resp.data = orjson.dumps([dump_plant(plant) for plant in plants])
        resp.content_type = falcon.MEDIA_JSON

    on_head = on_get  # the same answer, without its body (Falcon drops it)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        plant = self._load_new_plant(req)
        try:
            stored, created = self._store.create(plant, self._webhooks)
        except Conflict as exc:
            raise falcon.HTTPConflict(
                description=f"A plant with id {exc.stored.id} exists with a different name or tag."
            ) from None
        except StoreUnavailable as exc:
            self._on_unavailable("create", exc)
            raise falcon.HTTPServiceUnavailable(description=CREATE_UNKNOWN if exc.unknown
                                                else CREATE_NOT_DONE) from None
        if created and self._on_created is not None:
            self._on_created()
        resp.data = orjson.dumps(dump_plant(stored))
        resp.content_type = falcon.MEDIA_JSON

    def _load_new_plant(self, req: falcon.Request) -> Plant:
        content_type = req.content_type
        if content_type != falcon.MEDIA_JSON and (  # the usual header, exactly, is not parsed
                (content_type or "").partition(";")[0].strip().lower() != falcon.MEDIA_JSON):
            raise falcon.HTTPUnsupportedMediaType(
                description="The request body must be sent as Content-Type: application/json."
            )
        length = req.content_length
        if length is not None and length > self._max_body:
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
        except orjson.JSONDecodeError as exc:
            try:
                document = reparse(body, exc)  # a number orjson cannot hold, say 1e400
            except ValueError as refused:  # orjson's depth limit, or the fallback's (the same)
                if "nested too deeply" in str(refused):
                    raise falcon.HTTPBadRequest(description=(
                        "The request body is nested deeper than 1024 levels.")) from None
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


class PlantResource:
    def __init__(self, store: Store, on_unavailable: Callable[[str, StoreUnavailable], None] =
                 lambda op, exc: None) -> None:
        self._store = store
        self._on_unavailable = on_unavailable

    def on_delete(self, req: falcon.Request, resp: falcon.Response, plant_id: str) -> None:
        number = id_from_text(plant_id)
        if number is None:
            raise _bad_param("id", ID_RULE)  # POST's words for it
        try:
            deleted = self._store.delete(number)
        except StoreUnavailable as exc:
            self._on_unavailable("delete", exc)
            raise falcon.HTTPServiceUnavailable(description=DELETE_UNKNOWN if exc.unknown
                                                else DELETE_NOT_DONE) from None
        if not deleted:
            raise falcon.HTTPNotFound(description=f"There is no plant with id {number}.")
        resp.status = falcon.HTTP_204


def _too_large(limit: int) -> falcon.HTTPContentTooLarge:
    return falcon.HTTPContentTooLarge(
        description=errors.TOO_LARGE.format(limit)
    )


def _query(req: falcon.Request, name: str, pattern: re.Pattern[str], rule: str) -> str | None:
    values = req.params.get(name)
    if values is None:
        return None
    if not isinstance(values, str) or not pattern.fullmatch(values):
        raise _bad_param(name, rule)
    return values


def _bad_param(name: str, rule: str) -> falcon.HTTPBadRequest:
    """400 naming the parameter as marshmallow names a field: ``id: Must be ...``."""
    return falcon.HTTPBadRequest(description=f"{name}: {rule}")
