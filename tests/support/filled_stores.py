"""A store filled with every kind of record, and all that a client or the webhook worker
can see of it."""

from plant_store.stores.records import Plant

HOOK = ("http://127.0.0.1:9/hook",)


def fill(store):
    """Plants with deletes and re-creates, and deliveries pending, failed, dead and done."""
    for plant_id in range(30):
        store.create(Plant(plant_id, f"p{plant_id} \U0001f331", "t" if plant_id % 3 else None),
                     HOOK if plant_id < 4 else ())
    for plant_id in range(0, 30, 2):
        store.delete(plant_id)
    store.create(Plant(4, "back"))
    first, second, third, *_ = store.deliveries()
    store.settle(first.id, "delivered")
    store.settle(second.id, "failed", "HTTP 500")
    store.settle(third.id, "dead", "refused")


def state(store):
    """Everything a client or the webhook worker can see, with cursors."""
    pages, cursor = [], 0
    while cursor is not None:
        page, cursor = store.page(cursor, 4)
        pages.append((page, cursor))
    return pages, store.deliveries(), store.deliveries(dead=True), len(store)
