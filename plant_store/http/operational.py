"""The operational paths, outside the seed's contract and the token: an index, liveness,
readiness and the spec.

``/health`` says only that the process serves: a load balancer or orchestrator that
restarted the service whenever its database was down would restart every instance for
nothing. ``/ready`` says whether the store can take writes now; route traffic by it."""

import importlib.resources
from collections.abc import Callable

import falcon
import orjson

from plant_store import __version__
from plant_store.stores import Store, StoreUnavailable
from plant_store.util.forwarded import base_url

DOCUMENT = orjson.loads(
    importlib.resources.files("plant_store.http").joinpath("openapi.json").read_bytes())
HEALTHY = orjson.dumps({"status": "ok"})
READY = orjson.dumps({"status": "ready", "version": __version__})  # which release answers


class HealthResource:
    """``GET /health``: liveness, 200 whenever the process serves; it asks the store nothing."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.data = HEALTHY
        resp.content_type = falcon.MEDIA_JSON

    on_head = on_get  # the same answer, without its body (Falcon drops it)


class ReadyResource:
    """``GET /ready``: 200 (and the release) while the store can take writes, else 503
    naming why."""

    def __init__(self, store: Store,
                 tokens_problem: Callable[[], str | None] = lambda: None) -> None:
        """``tokens_problem()``: why every token is refused now (an unreadable token
        file), or None."""
        self._store = store
        self._tokens_problem = tokens_problem

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            self._store.check()
        except StoreUnavailable as exc:
            raise falcon.HTTPServiceUnavailable(
                description=f"The store cannot take writes now: {exc}") from None
        problem = self._tokens_problem()
        if problem is not None:
            raise falcon.HTTPServiceUnavailable(
                description=f"Every token is refused now: {problem}.")
        resp.data = READY
        resp.content_type = falcon.MEDIA_JSON

    on_head = on_get


class OpenApiResource:
    """The document, its ``servers`` URL saying where the client reached the service: the
    scheme, host and path prefix it used, as told by a trusted proxy where there is one."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.data = orjson.dumps({**DOCUMENT, "servers": [{"url": base_url(req)}]})
        resp.content_type = falcon.MEDIA_JSON

    on_head = on_get  # the same answer, without its body (Falcon drops it)


class IndexResource:
    """``GET /``: where to go from here, for a person or a client that starts at the root
    (without a token, it would get a bare 401 and no hint); ``/docs`` only where the
    interactive page is installed (the docs-page extra), since it answers 404 elsewhere."""

    def __init__(self, docs: bool) -> None:
        self._docs = docs

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        base = base_url(req)
        links = {"service": "plant-store", "docs": base + "/docs",
                 "openapi": base + "/openapi.json", "plants": base + "/plants"}
        if not self._docs:
            del links["docs"]
        resp.data = orjson.dumps(links)
        resp.content_type = falcon.MEDIA_JSON

    on_head = on_get
