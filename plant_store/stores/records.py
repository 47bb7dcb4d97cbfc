"""What a store keeps, at the bottom of the store layer: a plant, a plant with its version,
a webhook delivery, and a plant's one JSON form (its fields in one order, ``tag`` only
when it has one), which the HTTP answers, the journal, the outbox and the transfer files
all write through :func:`plant_fields` and :func:`new_plant_json`.

And a write's preconditions (If-Match, If-None-Match), decided where the store decides
(:class:`Preconditions`). The headers are parsed once, before any store lock
(``http.etags.preconditions``), into this value: the sets of versions each names, or
:data:`ANY` for ``*``. The store calls :meth:`Preconditions.refusal` with the version it
holds, under its lock or row lock, so no other write comes between the check and its own.

A version names one write of one id: it changes with every write and never repeats for
the id, across updates, deletes and re-creates, restores and imports (each store says how
it keeps that). A version of an earlier release has another shape (two parts, not three):
it names nothing here, so its request is refused, never misread. So a
precondition that held for a version the client saw never holds for a later write, even
one that put the same content back: a retried write cannot overwrite an acknowledged one.

The order (RFC 9110 13.2.2): If-None-Match first, so ``*`` or the stored version refuses
the write whatever the body; then a body equal to the stored plant writes nothing and
answers as done (13.1.1: a retried update answers as the first did); then If-Match.
"""

from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # a plant's id

class Plant(NamedTuple):
    """A named tuple: built once or more per request, and about half the cost of a
    frozen dataclass to build."""

    id: int
    name: str
    tag: str | None = None


class Versioned(NamedTuple):
    """A plant as stored, and its version: a name for the write that made it so, which
    changes with every write of the id and never repeats for it (across updates, deletes
    and re-creates, and a restore or an import: it names the history it was written in).
    A plant's ETag names its version (see :class:`Preconditions`)."""

    plant: Plant
    version: str


@dataclass(frozen=True, slots=True)
class Delivery:
    """A webhook delivery owed (or given up on): the NewPlant body exactly as it is sent
    and signed, and what its attempts came to."""

    id: str  # unique; receivers dedupe on it (delivery is at least once)
    plant_id: int
    url: str
    body: bytes  # the NewPlant JSON, exactly as it is sent and signed
    attempts: int = 0
    error: str | None = None
    dead: bool = False


def kept(data: bytes) -> bytes:
    """A copy of ``data`` of its own size, for bytes kept as long as a plant: orjson 3.11
    and later return bytes that hold a buffer of about 4 KiB (4,120 bytes resident each,
    measured with 3.13.0), 20 times the plant itself."""
    return bytes(memoryview(data))


def plant_fields(plant: Plant, with_id: bool = True) -> dict[str, Any]:
    """A plant's JSON object: a NewPlant (``id``, ``name``, ``tag``), or, without its id,
    the Plant the API answers; ``tag`` only when the plant has one."""
    if with_id:
        fields: dict[str, Any] = {"id": plant.id, "name": plant.name}
    else:
        fields = {"name": plant.name}
    if plant.tag is not None:
        fields["tag"] = plant.tag
    return fields


def new_plant_json(plant: Plant, newline: bool = False) -> bytes:
    """The NewPlant JSON of ``plant``: a webhook's body (kept as long as it is owed: see
    :func:`kept`), or, with ``newline``, one line of an export."""
    if newline:
        return orjson.dumps(plant_fields(plant), option=orjson.OPT_APPEND_NEWLINE)
    return kept(orjson.dumps(plant_fields(plant)))


ANY: frozenset[str] = frozenset()  # "*": compared by identity, never by value
"""The value of a header that was ``*``."""


@dataclass(frozen=True, slots=True)
class Preconditions:
    """The versions If-Match names (strong comparison: weak tags left out) and those
    If-None-Match names (weak comparison); None where the header is absent."""

    if_match: frozenset[str] | None = None
    if_none_match: frozenset[str] | None = None

    def refusal(self, version: str, equal: bool = False) -> str | None:
        """The header that refuses a write over the stored ``version`` (``equal``: the
        write would change nothing), or None when the write may go on."""
        none_match = self.if_none_match
        if none_match is not None and (none_match is ANY or version in none_match):
            return "If-None-Match"
        if equal:
            return None
        match = self.if_match
        if match is not None and match is not ANY and version not in match:
            return "If-Match"
        return None
