"""Entity tags of a plant, and the conditional headers that name them (RFC 9110 8.8.3, 13.1).

A plant's ETag is a digest of its name and tag, its representation's content: a strong
validator (equal ETags, equal bodies), the same on every instance and store, with nothing
stored beside the plant. A plant deleted and created again as it was has its old ETag,
which is right for a validator of the representation: a PUT conditional on it replaces
exactly what its client saw. The ``id`` is not in the body, so not in the digest.
"""

import hashlib
import json
import re

from plant_store.stores import Plant

# One list member: "*", or an entity tag, weak or not, and what surrounds it up to the next
# comma. Matched member by member (no nested repetition), so a huge header costs its length.
_MEMBER = re.compile(r'[ \t]*(?:(\*)|(W/)?("[\x21\x23-\x7e\x80-\xff]*"))[ \t]*(?:,|\Z)')
_EMPTY = re.compile(r"[ \t]*(?:,|\Z)")  # the list syntax allows empty members: "a, , b"


class Malformed(ValueError):
    """The header is not "*" or a list of entity tags."""


def etag(plant: Plant) -> str:
    """The strong ETag of ``plant``'s representation (JSON with escapes: any str, even a
    lone surrogate, has one unambiguous encoding)."""
    content = json.dumps([plant.name, plant.tag], ensure_ascii=True).encode()
    return f'"{hashlib.blake2b(content, digest_size=16).hexdigest()}"'


def parse(header: str) -> tuple[bool, list[tuple[bool, str]]]:
    """``header`` as (any: it was "*", [(weak, opaque tag), ...]); Malformed otherwise."""
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


def if_match(header: str, plant: Plant) -> bool:
    """If-Match holds for ``plant``: strong comparison, so a weak tag never matches."""
    star, tags = parse(header)
    return star or (False, etag(plant)) in tags


def if_none_match(header: str, plant: Plant) -> bool:
    """If-None-Match holds (the client's copy is not current): weak comparison."""
    star, tags = parse(header)
    current = etag(plant)
    return not star and all(opaque != current for _, opaque in tags)
