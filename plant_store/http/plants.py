"""The /plants resources: create (a NewPlant in, the Plant out), list (pages of Plants,
all or one tag's), and fetch, update (conditionally, with If-Match) or delete one plant.

Their JSON answers set no Content-Type: the app's default media type is JSON
(``create_app`` says so), and Falcon gives it to every answer with a body that names none,
which costs less than setting the header on each (the create is the hot path)."""

import contextlib
import io
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import falcon
import orjson
from marshmallow import ValidationError

from plant_store.events import Events
from plant_store.http import errors, etags
from plant_store.http.schemas import (
    ID_MAX,
    ID_MIN,
    ID_RULE,
    JsonInteger,
    NotAnObject,
    describe,
    dump_plant,
    id_from_text,
    json_object,
    load_new_plant,
    load_plant_update,
)
from plant_store.stores import Conflict, PreconditionFailed, Store, StoreUnavailable
from plant_store.stores.records import Plant, Preconditions
from plant_store.util.forwarded import base_url

_new_tuple = tuple.__new__  # a Plant built in C, as load_new_plant builds it
_JSON = falcon.MEDIA_JSON
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
                  "deleted. Send the same request again: 404 then means it is gone (with "
                  "If-Match, 412 means it was changed or created again since, and kept).")
UPDATE_NOT_DONE = "The store cannot update plants right now; the plant was not changed."
UPDATE_UNKNOWN = ("The store did not confirm the update in time; the plant may have been "
                  "updated. Send the same request again: it is safe, and answers 200 once "
                  "the plant is as sent (with If-Match, 412 if another write came first: "
                  "nothing of it is overwritten).")
_CONDITION_RULE = "Must be * or a list of entity tags, as ETag headers give them."
_CONDITION_SIZE = (f"The header is longer than {etags.MAX_HEADER:,} bytes; name fewer "
                   "entity tags.")
# A listing's tag filter, at most: its next page's Link repeats it, percent-encoded (up to
# 9 bytes a character), and answer headers must fit a proxy's buffer (nginx: 4 KiB).
MAX_TAG_FILTER = 256
_TAG_RULE = (f"Must be given once, and at most {MAX_TAG_FILTER} characters (a longer tag's "
             "plants are in the full listing).")


class PlantsResource:
    """``/plants``: create (POST, a NewPlant in, the Plant out) and list (GET, pages of
    Plants, all or one tag's)."""

    def __init__(
        self, store: Store, max_body_size: int, page_size: int = 100, max_page_size: int = 1000,
        webhooks: tuple[str, ...] = (), events: Events | None = None,
    ) -> None:
        """``events``: told each 503 the store caused (``unavailable``, the metrics) and
        each create that owes ``webhooks`` deliveries (``created``, the worker)."""
        self._store = store
        self._events = events if events is not None else Events()
        self._max_body = max_body_size
        self._page_size = page_size
        self._max_page = max_page_size
        self._webhooks = webhooks  # each create owes each of these a delivery

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        unknown = sorted(set(req.params) - {"limit", "cursor", "tag"})
        if unknown:
            raise falcon.HTTPBadRequest(
                description=f"{unknown[0]}: Not a parameter here; use limit, cursor and tag.")
        tag = req.params.get("tag")
        if not isinstance(tag, str | None) or (tag is not None and len(tag) > MAX_TAG_FILTER):
            raise _bad_param("tag", _TAG_RULE)
        given = _query(req, "limit", _LIMIT, _LIMIT_RULE)
        limit = self._page_size if given is None else int(given)
        if not 1 <= limit <= INT32_MAX:
            raise _bad_param("limit", _LIMIT_RULE)
        cursor = _query(req, "cursor", _CURSOR, "Must be a cursor from a Link header.")
        start = 0 if cursor is None else int(cursor)
        try:
            plants, after = self._store.page(start, min(limit, self._max_page), tag)
        except StoreUnavailable as exc:
            self._events.unavailable("list", exc.cause)
            raise falcon.HTTPServiceUnavailable(
                description="The store cannot list plants right now.") from None
        if after is not None:
            kept = "" if tag is None else f"&tag={quote(tag, safe='')}"  # the filter goes on
            resp.append_link(
                f"{base_url(req)}{req.path}?limit={limit}&cursor={after}{kept}", "next")
        resp.data = orjson.dumps([dump_plant(plant) for plant in plants])

    on_head = on_get  # the same answer, without its body (Falcon drops it)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        plant = read_new_plant(req, self._max_body)
        if plant is None:  # anything but the usual body: read, parsed and checked again
            try:
                plant = load_new_plant(read_object(req, self._max_body, "a NewPlant"))
            except ValidationError as exc:
                raise falcon.HTTPBadRequest(description=describe(exc)) from None
        try:
            stored, created = self._store.create(plant, self._webhooks)
        except Conflict as exc:
            raise falcon.HTTPConflict(
                description=f"A plant with id {exc.stored.id} exists with a different name or tag."
            ) from None
        except StoreUnavailable as exc:
            self._events.unavailable("create", exc.cause)
            raise falcon.HTTPServiceUnavailable(description=CREATE_UNKNOWN if exc.unknown
                                                else CREATE_NOT_DONE) from None
        if created and self._webhooks:
            self._events.created()
        # dump_plant(stored), inline (tests/unit/http/test_fast_paths.py checks the answer
        # against PlantSchema's dump).
        _, name, tag = stored
        resp.data = orjson.dumps({"name": name} if tag is None else {"name": name, "tag": tag})


class PlantResource:
    """One plant: GET (with its ETag), PUT and DELETE, each conditional on If-Match and
    If-None-Match (RFC 9110 13.2.2: a failed If-None-Match is 304 for a GET, 412 else)."""

    def __init__(self, store: Store, max_body_size: int, events: Events | None = None) -> None:
        """``events``: told each 503 the store caused (``unavailable``, the metrics)."""
        self._store = store
        self._max_body = max_body_size
        self._events = events if events is not None else Events()

    def on_get(self, req: falcon.Request, resp: falcon.Response, plant_id: str) -> None:
        number = _plant_id(plant_id)
        try:
            found = self._store.fetch(number)
        except StoreUnavailable as exc:
            self._events.unavailable("get", exc.cause)
            raise falcon.HTTPServiceUnavailable(
                description="The store cannot read plants right now.") from None
        if found is None:
            raise _not_found(number)
        condition = _preconditions(req)
        refused = None if condition is None else condition.refusal(found.version)
        if refused == "If-Match":
            raise _changed(number)
        resp.set_header("ETag", etags.etag(found.version))
        if refused is not None:  # If-None-Match names the current version: 304
            resp.status = falcon.HTTP_304
            return
        resp.data = orjson.dumps(dump_plant(found.plant))

    on_head = on_get  # the same answer, without its body (Falcon drops it)

    def on_put(self, req: falcon.Request, resp: falcon.Response, plant_id: str) -> None:
        number = _plant_id(plant_id)
        condition = _preconditions(req)
        try:
            plant = load_plant_update(read_object(req, self._max_body, "a Plant"), number)
        except ValidationError as exc:
            raise falcon.HTTPBadRequest(description=describe(exc)) from None
        with self._conditional_write("update", UPDATE_UNKNOWN, UPDATE_NOT_DONE):
            done = self._store.update(plant, condition)
        if done is None:
            raise _not_found(number)
        resp.set_header("ETag", etags.etag(done[0].version))
        resp.data = orjson.dumps(dump_plant(done[0].plant))

    def on_delete(self, req: falcon.Request, resp: falcon.Response, plant_id: str) -> None:
        number = _plant_id(plant_id)
        condition = _preconditions(req)
        with self._conditional_write("delete", DELETE_UNKNOWN, DELETE_NOT_DONE):
            deleted = self._store.delete(number, condition)
        if not deleted:
            raise _not_found(number)
        resp.status = falcon.HTTP_204

    @contextlib.contextmanager
    def _conditional_write(self, operation: str, unknown: str,
                           not_done: str) -> Iterator[None]:
        """A write's refusals as answers: 412 when its condition fails, 503 saying whether
        the write is known not done or its outcome unknown."""
        try:
            yield
        except PreconditionFailed as exc:
            raise _failed(exc) from None
        except StoreUnavailable as exc:
            self._events.unavailable(operation, exc.cause)
            raise falcon.HTTPServiceUnavailable(
                description=unknown if exc.unknown else not_done) from None


def _plant_id(text: str) -> int:
    number = id_from_text(text)
    if number is None:
        raise _bad_param("id", ID_RULE)  # POST's words for it
    return number


def _not_found(number: int) -> falcon.HTTPNotFound:
    return falcon.HTTPNotFound(description=f"There is no plant with id {number}.")


def _changed(number: int) -> falcon.HTTPPreconditionFailed:
    return falcon.HTTPPreconditionFailed(description=(
        f"Plant {number} is not at that ETag (If-Match): it changed since, or the ETag "
        "comes from an earlier release or another data set; nothing was changed. GET the "
        "plant again for its current ETag."))


def _failed(exc: PreconditionFailed) -> falcon.HTTPPreconditionFailed:
    """412 saying which header refused the stored plant."""
    if exc.header == "If-Match":
        return _changed(exc.stored.id)
    return falcon.HTTPPreconditionFailed(description=(
        f"Plant {exc.stored.id} is stored, and If-None-Match names its ETag (or is *); "
        "nothing was changed."))


def _preconditions(req: falcon.Request) -> Preconditions | None:
    """The request's If-Match and If-None-Match, parsed once, before the store is asked:
    400 when one is malformed, 431 when one is longer than etags.MAX_HEADER."""
    match, none_match = req.get_header("If-Match"), req.get_header("If-None-Match")
    try:
        return etags.preconditions(match, none_match)
    except ValueError as exc:
        header = "If-Match" if match is not None and exc.args[0] is match else "If-None-Match"
        if isinstance(exc, etags.TooLong):
            raise falcon.HTTPRequestHeaderFieldsTooLarge(
                description=f"{header}: {_CONDITION_SIZE}") from None
        raise _bad_param(header, _CONDITION_RULE) from None


def read_object(req: falcon.Request, max_body: int, shape: str) -> dict[str, Any]:
    """The request's JSON object body (``shape`` names it in errors): 415, 413 and 400 as
    the contract gives them for any body."""
    content_type = req.content_type
    if content_type != falcon.MEDIA_JSON and (  # the usual header, exactly, is not parsed
            (content_type or "").partition(";")[0].strip().lower() != falcon.MEDIA_JSON):
        raise falcon.HTTPUnsupportedMediaType(
            description="The request body must be sent as Content-Type: application/json."
        )
    length = req.content_length
    if length is not None and length > max_body:
        raise _too_large(max_body)
    # A server that dechunks without a Content-Length says so (PEP 3333 extension); one
    # that cannot tell such a body whole from cut short refuses its read (granian's,
    # plant_store.serving.server_quirks).
    stream = req.stream if req.env.get("wsgi.input_terminated") else req.bounded_stream
    body = stream.read(max_body + 1)
    if len(body) > max_body:
        raise _too_large(max_body)
    if length is not None and len(body) < length:  # the connection broke mid-body
        raise falcon.HTTPBadRequest(description=(
            f"The request body ended after {len(body)} of its {length} bytes "
            "(Content-Length); nothing was done."))
    if not body:
        raise falcon.HTTPBadRequest(description=f"The request body is empty; send {shape}.")
    try:
        return json_object(body, shape)
    except NotAnObject as exc:
        raise falcon.HTTPBadRequest(description=f"The request body is {exc}.") from None


def read_new_plant(req: falcon.Request, max_body: int) -> Plant | None:
    """The usual create's body as its Plant, read, parsed and checked in one step:
    the usual request (``Content-Type: application/json`` exactly, a Content-Length of
    plain digits within the limit, the whole body there, read from the server's stream at
    once, without Falcon's ``bounded_stream`` and header properties), a body orjson parses
    to an object, and
    :func:`~plant_store.http.schemas.load_new_plant`'s plainly valid document, each test
    theirs. None for anything else, what was read handed back as the stream, so that
    ``load_new_plant(read_object(...))`` reads it again and gives every other answer
    (tests/unit/http/test_fast_paths.py checks that both ways agree on any request): the
    usual create costs one call here rather than three (``read_object``'s read,
    ``json_object``, ``load_new_plant``)."""
    env = req.env
    length = env.get("CONTENT_LENGTH")
    if (env.get("CONTENT_TYPE") == _JSON and length and length.isascii()
            and length.isdigit() and 0 < (size := int(length)) <= max_body):
        stream = env["wsgi.input"]
        body = stream.read(max_body + 1 if env.get("wsgi.input_terminated") else size)
        if len(body) == size:
            try:
                document = orjson.loads(body)
            except orjson.JSONDecodeError:
                document = None
            if type(document) is dict:
                plant_id, name, tag = (document.get("id"), document.get("name"),
                                       document.get("tag"))
                if (type(plant_id) is int and ID_MIN <= plant_id <= ID_MAX
                        and type(name) is str
                        and (type(tag) is str or (tag is None and "tag" not in document))):
                    return _new_tuple(Plant, (plant_id, name, tag))
        req.stream = env["wsgi.input"] = io.BytesIO(body)
    return None


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
