"""The creation order of each tag's plants, for ``GET /plants?tag=T``: a page of one tag
costs that page, not a scan of every plant. A plant keeps its sequence number in its tag's
order as in the store's, so one cursor serves both, and a retag moves it in place."""

from plant_store.stores.order import CreationOrder


class TagIndex:
    """Each tag's plants in creation order: a listing by tag costs its page, not the store."""

    def __init__(self, seqs: dict[str, dict[int, int]] | None = None) -> None:
        """``seqs``: each tag's plants, sequence number -> id, as a replay found them."""
        self._orders = {tag: CreationOrder(ids) for tag, ids in (seqs or {}).items()}

    def add(self, tag: str | None, seq: int, plant_id: int) -> None:
        if tag is not None:
            order = self._orders.get(tag)
            if order is None:
                order = self._orders[tag] = CreationOrder()
            order.add(plant_id, seq)

    def remove(self, tag: str | None, seq: int) -> None:
        order = None if tag is None else self._orders.get(tag)
        if order is not None:
            order.remove(seq)
            if not len(order):  # a tag no plant has any more costs nothing
                del self._orders[tag]  # type: ignore[arg-type]

    def page(self, tag: str, start: int, limit: int) -> list[tuple[int, int]]:
        """As :meth:`CreationOrder.page`, for the plants tagged ``tag``."""
        order = self._orders.get(tag)
        return [] if order is None else order.page(start, limit)
