"""The operational paths, outside the seed's contract and the token: health and the spec."""

import importlib.resources

import falcon
import orjson

from plant_store.stores import Store, StoreUnavailable

OPENAPI = importlib.resources.files("plant_store").joinpath("openapi.json").read_bytes()
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


class OpenApiResource:
    """The document, its ``servers`` URL carrying the path the service is mounted under."""

    def __init__(self) -> None:
        self._by_prefix = {"": OPENAPI}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        prefix = req.root_path
        if prefix not in self._by_prefix:
            document = orjson.loads(OPENAPI)
            document["servers"] = [{"url": prefix}]
            self._by_prefix[prefix] = orjson.dumps(document)
        resp.data = self._by_prefix[prefix]
        resp.content_type = falcon.MEDIA_JSON
