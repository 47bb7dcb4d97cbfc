"""What a store does in a forked child."""

from plant_store.stores import StoreUnavailable
from plant_store.stores.records import Plant


def write_in_child(store):
    """What a write does in a forked child, told as bytes to the parent."""
    try:
        store.create(Plant(2, "child's"))
    except StoreUnavailable as exc:
        return b"refused: " + str(exc).encode()
    return b"wrote"
