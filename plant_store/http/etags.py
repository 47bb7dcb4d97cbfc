"""Entity tags of a plant, and the conditional headers that name them (RFC 9110 8.8.3, 13.1).

A plant's ETag names its version (:class:`plant_store.stores.Versioned`), not its content:
it changes with every write of the plant and never repeats for its id, across updates,
deletes and re-creates, restarts, restores of backups and imports of exports (each store
stamps a write with what no restore brings back: the JSON file a random epoch a run, the
memory store one a process, PostgreSQL a random number a write), so a request conditional
on an ETag it once saw can never overwrite a later write, even one that put the same
content back. A strong validator: one version, one body.

The conditional headers are parsed once, before the store is asked, into
:class:`Preconditions`, and bounded (:data:`MAX_HEADER`): a long list costs its length
here, outside any lock, and a set lookup where the store decides.
"""

import re

from plant_store.stores.records import ANY, Preconditions

MAX_HEADER = 8192  # bytes of an If-Match or If-None-Match value, at most
# One list member: "*", or an entity tag, weak or not, and what surrounds it up to the next
# comma. Matched member by member (no nested repetition), so a huge header costs its length.
_MEMBER = re.compile(r'[ \t]*(?:(\*)|(W/)?"([\x21\x23-\x7e\x80-\xff]*)")[ \t]*(?:,|\Z)')
_EMPTY = re.compile(r"[ \t]*(?:,|\Z)")  # the list syntax allows empty members: "a, , b"


class Malformed(ValueError):
    """The header is not "*" or a list of entity tags."""


class TooLong(ValueError):
    """The header is longer than :data:`MAX_HEADER`."""


def etag(version: str) -> str:
    """The strong ETag of a plant's ``version``."""
    return f'"{version}"'


def parse(header: str) -> tuple[bool, list[tuple[bool, str]]]:
    """``header`` as (any: it was "*", [(weak, opaque tag without quotes), ...]); Malformed
    otherwise, TooLong past :data:`MAX_HEADER`."""
    if len(header) > MAX_HEADER:
        raise TooLong(header)
    tags: list[tuple[bool, str]] = []
    at, end, star = 0, len(header), False
    while at < end:
        empty = _EMPTY.match(header, at)
        if empty:
            at = empty.end()
            continue
        member = _MEMBER.match(header, at)
        if member is None or member.end() == at:
            raise Malformed(header)
        if member.group(1):
            star = True
        else:
            tags.append((member.group(2) is not None, member.group(3)))
        at = member.end()
    if (star and tags) or (not star and not tags):
        raise Malformed(header)  # "*" stands alone; an empty value names nothing
    return star, tags


def if_match(header: str) -> frozenset[str]:
    """The versions If-Match names: strong comparison, so a weak tag names none."""
    star, tags = parse(header)
    return ANY if star else frozenset(opaque for weak, opaque in tags if not weak)


def if_none_match(header: str) -> frozenset[str]:
    """The versions If-None-Match names: weak comparison, so a weak tag names its own."""
    star, tags = parse(header)
    return ANY if star else frozenset(opaque for _, opaque in tags)


def preconditions(match: str | None, none_match: str | None) -> Preconditions | None:
    """The request's preconditions (None: it has neither header); Malformed, TooLong."""
    if match is None and none_match is None:
        return None
    return Preconditions(None if match is None else if_match(match),
                         None if none_match is None else if_none_match(none_match))
