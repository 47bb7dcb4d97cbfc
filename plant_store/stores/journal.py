"""The JSON Lines format of the JSON-file store, and reading it back.

One record a line, each a JSON object with an ``op``. A line is only ever appended, so a
crash can tear at most the last one; anything invalid before it is corruption, which is
reported with its line number and never repaired silently.
"""

from dataclasses import dataclass

import orjson

from plant_store.stores.base import Plant, StoreError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class CorruptJournal(StoreError):
    def __init__(self, path: str, lineno: int, reason: str) -> None:
        super().__init__(f"{path}: line {lineno} is corrupt ({reason}); the file was not changed")
        self.path, self.lineno, self.reason = path, lineno, reason


def encode_create(plant: Plant) -> bytes:
    record = {"op": "create", "id": plant.id, "name": plant.name}
    if plant.tag is not None:
        record["tag"] = plant.tag
    return orjson.dumps(record)


def decode_plant(record: bytes) -> Plant:
    fields = orjson.loads(record)
    return Plant(fields["id"], fields["name"], fields.get("tag"))


def _check_create(record: dict) -> int:
    plant_id, name = record.get("id"), record.get("name")
    if type(plant_id) is not int or not INT64_MIN <= plant_id <= INT64_MAX:
        raise ValueError("id is not an int64")
    if type(name) is not str:
        raise ValueError("name is not a string")
    if "tag" in record and type(record["tag"]) is not str:
        raise ValueError("tag is not a string")
    return plant_id


@dataclass
class Journal:
    """What a journal file holds: the live records by id, and where its valid part ends."""

    path: str
    index: dict[int, bytes]
    size: int
    torn: int


def read(path: str, data: bytes) -> Journal:
    """Replay ``data`` (the bytes of ``path``) into an index; raise CorruptJournal."""
    lines = data.split(b"\n")
    tail = lines.pop()  # bytes after the last newline: empty unless the last append tore
    index: dict[int, bytes] = {}
    size = 0
    last = len(lines)
    for lineno, line in enumerate(lines, 1):
        try:
            record = orjson.loads(line)
            if type(record) is not dict or record.get("op") != "create":
                raise ValueError("not a create record")
            plant_id = _check_create(record)
            if plant_id in index:
                raise ValueError(f"id {plant_id} is created twice")
        except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
            if lineno == last and not tail:
                return Journal(path, index, size, len(data) - size)
            raise CorruptJournal(path, lineno, str(exc)) from None
        index[plant_id] = line
        size += len(line) + 1
    return Journal(path, index, size, len(tail))
