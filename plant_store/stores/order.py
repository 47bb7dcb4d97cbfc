"""Creation order with deletes: each create takes the next sequence number, and a page
starts at a sequence number, so a cursor stays valid whatever is deleted before it."""

from itertools import islice

from sortedcontainers import SortedDict


class CreationOrder:
    def __init__(self, ids: dict[int, int] | None = None, next_seq: int = 0) -> None:
        self._ids: SortedDict = SortedDict(ids or {})  # sequence number -> plant id
        self.next_seq = max(next_seq, self._ids.keys()[-1] + 1 if self._ids else 0)

    def add(self, plant_id: int, seq: int | None = None) -> int:
        """Append ``plant_id`` (at ``seq`` when replaying one); return its sequence number."""
        if seq is None:
            seq = self.next_seq
        self._ids[seq] = plant_id
        self.next_seq = max(self.next_seq, seq + 1)
        return seq

    def remove(self, seq: int) -> None:
        del self._ids[seq]

    def page(self, start: int, limit: int) -> list[tuple[int, int]]:
        """Up to ``limit`` + 1 (seq, id) pairs from ``start``: the extra one tells whether
        more follow. Costs log n plus the page."""
        seqs = islice(self._ids.irange(minimum=start), limit + 1)
        return [(seq, self._ids[seq]) for seq in seqs]

    def __iter__(self):
        return iter(self._ids.items())
