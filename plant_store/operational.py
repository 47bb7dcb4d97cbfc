"""The operational paths, outside the seed's contract and the token: health and the spec."""

import importlib.resources

import falcon
import orjson

from plant_store.stores import Store, StoreUnavailable

DOCUMENT = orjson.loads(
    importlib.resources.files("plant_store").joinpath("openapi.json").read_bytes())
HEALTHY = orjson.dumps({"status": "ok"})


class HealthResource:
    def __init__(self, store: Store) -> None:
        self._store = store

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            self._store.check()
        except StoreUnavailable as exc:
            raise falcon.HTTPServiceUnavailable(
                description=f"The store is not usable: {exc}") from None
        resp.data = HEALTHY
        resp.content_type = falcon.MEDIA_JSON

    on_head = on_get  # the same answer, without its body (Falcon drops it)


class OpenApiResource:
    """The document, its ``servers`` URL saying where the client reached the service: the
    scheme, host and path prefix it used, as told by a trusted proxy where there is one."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.data = orjson.dumps({**DOCUMENT, "servers": [{"url": req.prefix}]})
        resp.content_type = falcon.MEDIA_JSON

    on_head = on_get  # the same answer, without its body (Falcon drops it)
