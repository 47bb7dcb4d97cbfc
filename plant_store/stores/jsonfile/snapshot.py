"""The JSON-file store as its file holds it now, read without its lock, for the commands
that only look (``plant-store check``, ``plants``, ``webhooks list``): beside a running
server too, since the file is append-only and a torn last line is skipped. What it shows
may include a write still waiting for its fsync. The one way the command line reads the
file: it never reaches into the journal's records itself."""

import itertools
import os
from collections.abc import Iterator

from plant_store.stores.base import DataDirError
from plant_store.stores.jsonfile import journal
from plant_store.stores.jsonfile.store import DATA_FILE
from plant_store.stores.records import Delivery, Plant, Versioned
from plant_store.util import files


class Snapshot:
    """One reading of a data directory's journal: its plants, outbox and state."""

    def __init__(self, data_dir: str) -> None:
        """Read ``data_dir``'s journal (DataDirError, CorruptJournal)."""
        path = os.path.join(data_dir, DATA_FILE)
        try:
            with open(path, "rb", opener=files.opener) as fh:  # a FIFO would hang
                self._state = journal.read(path, fh.read())
        except OSError as exc:
            raise DataDirError(f"cannot read {path}: {exc.strerror}") from None
        self.path, self.size = path, self._state.size
        self.records, self.torn = self._state.records, self._state.torn

    def __len__(self) -> int:
        return len(self._state.index)

    def fetch(self, plant_id: int) -> Versioned | None:
        """The plant stored under ``plant_id``, with its version, if any."""
        stored = self._state.index.get(plant_id)
        if stored is None:
            return None
        return Versioned(journal.decode_plant(stored[1]),
                         journal.version(stored[3], stored[0], stored[2]))

    def walk(self, limit: int | None = None) -> Iterator[Plant]:
        """The plants in creation order, at most ``limit`` of them."""
        index = self._state.index
        for _, plant_id in itertools.islice(self._state.order, limit):
            yield journal.decode_plant(index[plant_id][1])

    def deliveries(self, *, dead: bool = False) -> list[Delivery]:
        """The deliveries owed (or, with ``dead``, the dead letters), oldest first."""
        return self._state.outbox.list(dead=dead)
