"""Creation order with deletes, of the store's plants (:class:`CreationOrder`) and of each
tag's (:class:`TagIndex`): each create takes the next sequence number, and a page starts at
a sequence number, so a cursor stays valid whatever is deleted before it.

Two arrays of 8-byte integers, sorted by sequence number: a create is an append (creates
are the hot path), a page is a binary search plus a scan. A delete leaves a tombstone until
tombstones outnumber live entries; then the arrays are rebuilt without them, so a scan
never passes more dead entries than live ones in all and memory stays about 16 bytes a plant.

The tags' orders serve ``GET /plants?tag=T``: a page of one tag costs that page, not a
scan of every plant. A plant keeps its sequence number in its tag's order as in the
store's, so one cursor serves both, and a retag moves it in place.
"""

from array import array
from bisect import bisect_left
from collections.abc import Iterator

MIN_REBUILD = 1024  # tombstones kept at least, so small stores do not rebuild on every delete


class CreationOrder:
    """Plant ids in creation order, by sequence number, with tombstones (the module's
    docstring)."""

    def __init__(self, ids: dict[int, int] | None = None, next_seq: int = 0) -> None:
        ids = ids or {}  # sequence number -> plant id, as a replay found them (in order)
        seqs = sorted(ids)
        self._seqs = array("q", seqs)
        self._ids = array("q", map(ids.__getitem__, seqs))
        self._dead: set[int] = set()  # sequence numbers of tombstones
        self.next_seq = max(next_seq, self._seqs[-1] + 1 if self._seqs else 0)

    def append(self, plant_id: int) -> int:
        """Append ``plant_id`` at the next sequence number, and return it: a create's step,
        :meth:`add` without its argument and branches (a create's store work is a handful
        of these steps, so each counts)."""
        seq = self.next_seq
        self._ids.append(plant_id)  # first: an id beyond int64 fails here, changing nothing
        self._seqs.append(seq)
        self.next_seq = seq + 1
        return seq

    def add(self, plant_id: int, seq: int | None = None) -> int:
        """Append ``plant_id`` (at ``seq`` when replaying one or undoing a delete); return
        its sequence number."""
        if seq is None or seq >= self.next_seq:
            seq = self.next_seq if seq is None else seq
            self._ids.append(plant_id)  # first: an id beyond int64 fails here, changing nothing
            self._seqs.append(seq)
            self.next_seq = seq + 1
        elif seq in self._dead:
            self._dead.remove(seq)
        else:  # its tombstone was rebuilt away meanwhile
            at = bisect_left(self._seqs, seq)
            self._ids.insert(at, plant_id)
            self._seqs.insert(at, seq)
        return seq

    def remove(self, seq: int) -> None:
        self._dead.add(seq)
        if len(self._dead) > max(MIN_REBUILD, len(self._seqs) // 2):
            live = list(self)
            self._seqs = array("q", [seq for seq, _ in live])
            self._ids = array("q", [plant_id for _, plant_id in live])
            self._dead.clear()

    def page(self, start: int, limit: int) -> list[tuple[int, int]]:
        """Up to ``limit`` + 1 (seq, id) pairs from ``start``: the extra one tells whether
        more follow."""
        entries = []
        seqs, dead = self._seqs, self._dead
        for at in range(bisect_left(seqs, start), len(seqs)):
            if seqs[at] not in dead:
                entries.append((seqs[at], self._ids[at]))
                if len(entries) > limit:
                    break
        return entries

    def __iter__(self) -> Iterator[tuple[int, int]]:
        dead = self._dead
        return ((seq, plant_id) for seq, plant_id in zip(self._seqs, self._ids, strict=True)
                if seq not in dead)

    def __len__(self) -> int:
        return len(self._seqs) - len(self._dead)


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

    def append(self, tag: str, seq: int, plant_id: int) -> None:
        """:meth:`add` for a create: ``seq`` is the store's next sequence number, so it is
        past every one of ``tag``'s, and the tag's order goes on from there
        (:meth:`CreationOrder.append`)."""
        order = self._orders.get(tag)
        if order is None:
            order = self._orders[tag] = CreationOrder()
        order.next_seq = seq
        order.append(plant_id)

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
