"""Plants straight from the store, for ``plant-store plants``: the operator's view, ids
included, without a token or a server.

The JSON-file store is read without its lock, as ``plant-store check`` reads it, so this
works beside a running server: the file is append-only and a torn last line is skipped.
It shows what the file holds, so a create whose fsync is still under way may show before
its client hears 200. The PostgreSQL store is shared: it is opened like any instance.
The memory store lives inside its server's process only.
"""

from collections.abc import Iterator

from plant_store.config import Config
from plant_store.http.schemas import id_from_text
from plant_store.stores import Store, StoreError, jsonfile, open_store
from plant_store.stores.records import INT64_MAX, INT64_MIN, Plant, Versioned

PAGE = 1000


def parse_id(text: str) -> int:
    plant_id = id_from_text(text)  # as the API reads one
    if plant_id is None:
        raise StoreError(f"id {text!r}: must be an integer from {INT64_MIN} to {INT64_MAX}")
    return plant_id


def walk(config: Config, limit: int | None = None) -> Iterator[Plant]:
    """The plants in creation order, at most ``limit`` of them."""
    if config.store == "jsonfile":
        yield from jsonfile.Snapshot(config.data_dir).walk(limit)
        return
    with _shared(config) as store:
        for plants in store.pages(PAGE, limit):
            yield from plants


def fetch(config: Config, plant_id: int) -> Versioned | None:
    if config.store == "jsonfile":
        return jsonfile.Snapshot(config.data_dir).fetch(plant_id)
    with _shared(config) as store:
        return store.fetch(plant_id)


def _shared(config: Config) -> Store:
    """The shared store, read only: a schema that lacks migrations is refused, never
    migrated (a look at the plants mid rolling upgrade must not change the schema)."""
    if config.store == "memory":
        raise StoreError("store=memory keeps its plants inside its server's process only: "
                         "ask the server (GET /plants)")
    return open_store(config, migrate=False)
