"""The JSON Lines format of the JSON-file store, and reading it back.

One record a line, each a JSON object with an ``op``:

- ``create``: a plant (``id``, ``name``, optional ``tag``), with the webhook deliveries it
  owes (``webhooks``: ``[{"id", "url"}]``) and, in a compacted file, its ``seq`` and, once
  updated, its ``rev``;
- ``update``: a plant's new ``name`` and optional ``tag`` (absent: none) under its ``id``;
  it keeps its sequence number and counts one more revision (a compacted file has its
  create record, as updated, with the count in ``rev``);
- ``delete``: ``id``;
- ``delivery``: an outcome (``state`` delivered/failed/dead/retry, ``error``) of ``id``;
- ``compacted``: the first line of a compacted file, with the ``next_seq`` to go on from;
- ``outbox``: in a compacted file, a delivery still owed or dead, with its state;
- ``epoch``: the epoch of the creates and updates after it (``epoch``, hex digits), up to
  the next such line. A store draws a new random epoch each time it is opened and writes
  this line before the first create or update of that run; a compacted file writes one
  before each plant whose epoch differs from the plant's before it (and ends with the
  running store's). Before any such line (a file of an earlier release): :data:`LEGACY`.

A plant's version is the epoch of its last write, its sequence number (a re-create takes a
new one: ``next_seq`` only grows, and a compacted file keeps it) and its revision (updates
since its create): :func:`version`. The sequence number and revision tell one run's writes
apart; the epoch tells runs apart, so a data set whose history went back (an older copy
of the file put back, an export imported into a fresh directory, where sequence numbers
start again at 0) never issues a version an earlier run issued: the next write of each
plant is in a new epoch. A plant untouched since keeps the version it had.

A line is only ever appended, so a crash can tear at most the last one; anything invalid
before it is corruption, which is reported with its line number and never repaired.
"""

import re
import secrets
from dataclasses import dataclass
from typing import Any, Literal, overload

import orjson

from plant_store.stores.base import StoreError
from plant_store.stores.order import CreationOrder, TagIndex
from plant_store.stores.outbox import STATES, Outbox
from plant_store.stores.records import (
    INT64_MAX,
    INT64_MIN,
    Delivery,
    Plant,
    kept,
    new_plant_json,
    plant_fields,
)


class CorruptJournal(StoreError):
    """A line before the last is not a valid record: the file is refused, never repaired."""

    def __init__(self, path: str, lineno: int, reason: str) -> None:
        super().__init__(f"{path}: line {lineno} is corrupt ({reason}); the file was not changed")
        self.path, self.lineno, self.reason = path, lineno, reason


# The codec of a stored plant, its one reader and its one writer: a record that holds a
# plant is written by encode_create or encode_update (through records.plant_fields, the
# plant's one JSON form) and read back by plant_values, checked, whether it is replayed at
# start-up or read from the index (decode_plant).

def encode_create(plant: Plant, deliveries: list[Delivery] | tuple[Delivery, ...] = ()) -> bytes:
    record = {"op": "create", **plant_fields(plant)}
    if deliveries:
        record["webhooks"] = [{"id": d.id, "url": d.url} for d in deliveries]
    return kept(orjson.dumps(record))


def encode_update(plant: Plant) -> bytes:
    return orjson.dumps({"op": "update", **plant_fields(plant)})


def plant_values(record: dict[str, Any]) -> tuple[int, str, str | None]:
    """The id, name and tag of a record that holds a plant (a create, an update, an outbox
    body), checked; a tuple, not a Plant, since making a Plant for each of a million
    records at start-up costs seconds."""
    plant_id, name, tag = record.get("id"), record.get("name"), record.get("tag")
    if type(plant_id) is not int or not INT64_MIN <= plant_id <= INT64_MAX:
        raise ValueError("id is not an int64")
    if type(name) is not str:
        raise ValueError("name is not a string")
    if "tag" in record and type(tag) is not str:
        raise ValueError("tag is not a string")
    return plant_id, name, tag


def decode_plant(record: bytes) -> Plant:
    """The plant of a create record the index keeps."""
    return Plant(*plant_values(orjson.loads(record)))


LEGACY = "0"  # the epoch of what a file holds before its first epoch line
_EPOCH = re.compile(r"[0-9a-f]{1,32}")


def new_epoch() -> str:
    """A random epoch for a run of the store: 64 bits, so no two runs ever share one."""
    return secrets.token_hex(8)


def version(epoch: str, seq: int, rev: int) -> str:
    """The version of a plant created at ``seq``, updated ``rev`` times since, its last
    write made in ``epoch``. Three parts: never equal to an earlier release's "seq.rev"."""
    return f"{epoch}.{seq}.{rev}"


def encode_epoch(epoch: str) -> bytes:
    return orjson.dumps({"op": "epoch", "epoch": epoch})


def encode_delete(plant_id: int) -> bytes:
    return orjson.dumps({"op": "delete", "id": plant_id})


def encode_outcome(delivery_id: str, state: str, error: str | None) -> bytes:
    return orjson.dumps({"op": "delivery", "id": delivery_id, "state": state, "error": error})


def encode_outbox(d: Delivery) -> bytes:
    return orjson.dumps({"op": "outbox", "id": d.id, "url": d.url, "body": orjson.Fragment(d.body),
                         "attempts": d.attempts, "error": d.error, "dead": d.dead})


def encode_header(next_seq: int) -> bytes:
    return orjson.dumps({"op": "compacted", "next_seq": next_seq})


def _int(record: dict[str, Any], key: str, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    value = record.get(key)
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{key} is not an integer from {low} to {high}")
    return value


@overload
def _str(record: dict[str, Any], key: str, optional: Literal[False] = False) -> str: ...
@overload
def _str(record: dict[str, Any], key: str, optional: bool) -> str | None: ...
def _str(record: dict[str, Any], key: str, optional: bool = False) -> str | None:
    value = record.get(key)
    if not (type(value) is str or (optional and value is None)):
        raise ValueError(f"{key} is not a string")
    return value


@dataclass
class Journal:
    """What a journal file holds: live plants by id as (seq, create record, rev, epoch),
    their order, the outbox, where the valid part ends, and how many records it has
    (headers and epoch lines aside)."""

    path: str
    index: dict[int, tuple[int, bytes, int, str]]
    order: CreationOrder
    tags: TagIndex
    outbox: Outbox
    size: int
    torn: int
    records: int


class _Replay:
    """Start-up reads every line once, so the common create is kept to a few checks and
    the creation order is sorted once at the end."""

    def __init__(self) -> None:
        self.index: dict[int, tuple[int, bytes, int, str]] = {}
        self.seqs: dict[int, int] = {}  # seq -> id, made into a CreationOrder at the end
        self.tag_seqs: dict[str, dict[int, int]] = {}  # the same, for each tag
        self.next_seq = 0
        self.outbox = Outbox()
        self.headers = 0  # lines that are no record: compacted, epoch
        self.epoch = LEGACY  # of the creates and updates read from here on

    def order(self) -> CreationOrder:
        return CreationOrder(self.seqs, self.next_seq)

    def tags(self) -> TagIndex:
        return TagIndex(self.tag_seqs)

    def _untag(self, plant_id: int) -> int:
        """Take ``plant_id`` out of its tag's order; its sequence number."""
        seq, line, _, _ = self.index[plant_id]
        tag = decode_plant(line).tag
        if tag is not None:
            seqs = self.tag_seqs[tag]
            del seqs[seq]
            if not seqs:
                del self.tag_seqs[tag]
        return seq

    def apply(self, line: bytes, record: dict[str, Any]) -> None:
        op = record.get("op")
        if op == "create":
            self._create(line, record)
        elif op == "delete":
            plant_id = _int(record, "id")
            if plant_id not in self.index:
                raise ValueError(f"id {plant_id} is deleted but not stored")
            del self.seqs[self._untag(plant_id)]
            del self.index[plant_id]
        elif op == "update":
            plant = Plant(*plant_values(record))
            if plant.id not in self.index:
                raise ValueError(f"id {plant.id} is updated but not stored")
            rev = self.index[plant.id][2] + 1
            seq = self._untag(plant.id)
            self.index[plant.id] = (seq, encode_create(plant), rev, self.epoch)
            if plant.tag is not None:
                self.tag_seqs.setdefault(plant.tag, {})[seq] = plant.id
        elif op == "delivery":
            state = record.get("state")
            if state not in STATES:
                raise ValueError("state is not a delivery state")
            try:
                self.outbox.settle(_str(record, "id"), state, _str(record, "error", True))
            except KeyError:
                raise ValueError("the delivery is not in the outbox") from None
        elif op == "outbox":
            body = record.get("body")
            if type(body) is not dict:
                raise ValueError("body is not an object")
            dead = record.get("dead")
            if type(dead) is not bool:
                raise ValueError("dead is not a boolean")
            plant = Plant(*plant_values(body))
            self.outbox.add(Delivery(
                _str(record, "id"), plant.id, _str(record, "url"), new_plant_json(plant),
                _int(record, "attempts", 0), _str(record, "error", True), dead))
        elif op == "epoch":
            epoch = _str(record, "epoch")
            if not _EPOCH.fullmatch(epoch):
                raise ValueError("epoch is not 1 to 32 hex digits")
            self.headers += 1
            self.epoch = epoch
        elif op == "compacted":
            self.headers += 1
            self.next_seq = max(self.next_seq, _int(record, "next_seq", 0))
        else:
            raise ValueError("unknown op")

    def _create(self, line: bytes, record: dict[str, Any]) -> None:
        plant_id, name, tag = plant_values(record)
        if plant_id in self.index:
            raise ValueError(f"id {plant_id} is created twice")
        seq, rev = self.next_seq, 0
        if len(record) > 3 + ("tag" in record):  # more than a plain create: seq, rev, webhooks
            if "seq" in record:
                seq = _int(record, "seq", 0)
            if "rev" in record:
                rev = _int(record, "rev", 0)
            suffix = b',"seq":%d,"rev":%d}' % (seq, rev) if rev else b',"seq":%d}' % seq
            if len(record) == 4 + ("tag" in record) + bool(rev) and line.endswith(suffix):
                line = line[:-len(suffix)] + b"}"  # as compaction writes it: cut, not encoded
            else:
                plant = Plant(plant_id, name, tag)
                self._owe(plant, record.get("webhooks", []))
                line = encode_create(plant)  # the index keeps just the plant
        self.next_seq = max(self.next_seq, seq + 1)
        self.seqs[seq] = plant_id
        self.index[plant_id] = (seq, line, rev, self.epoch)
        if tag is not None:
            self.tag_seqs.setdefault(tag, {})[seq] = plant_id

    def _owe(self, plant: Plant, webhooks: Any) -> None:  # checked here: JSON as read
        if type(webhooks) is not list or not all(type(hook) is dict for hook in webhooks):
            raise ValueError("webhooks is not a list of objects")
        body = new_plant_json(plant)
        owed = [Delivery(_str(hook, "id"), plant.id, _str(hook, "url"), body) for hook in webhooks]
        for delivery in owed:
            self.outbox.add(delivery)


def read(path: str, data: bytes) -> Journal:
    """Replay ``data`` (the bytes of ``path``); raise CorruptJournal."""
    lines = data.split(b"\n")
    tail = lines.pop()  # bytes after the last newline: empty unless the last append tore
    state = _Replay()
    size = 0
    last = len(lines)
    for lineno, line in enumerate(lines, 1):
        try:
            record = orjson.loads(line)
            if type(record) is not dict:
                raise ValueError("not a JSON object")
            state.apply(line, record)
        except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
            if lineno == last and not tail:
                return Journal(path, state.index, state.order(), state.tags(), state.outbox, size,
                               len(data) - size, lineno - 1 - state.headers)
            raise CorruptJournal(path, lineno, str(exc)) from None
        size += len(line) + 1
    return Journal(path, state.index, state.order(), state.tags(), state.outbox, size, len(tail),
                   last - state.headers)
