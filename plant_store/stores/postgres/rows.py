"""Rows to plants, versions and deliveries, and text to bytes for the queries: the store's
own columns are bytea, so that what a client sent is what it gets back, byte for byte."""

from plant_store.stores.base import Plant
from plant_store.stores.outbox import Delivery


def version(position: int, rev: int, stamp: int) -> str:
    """A plant's version: its create's position (a re-create has a new one), its revision
    (counted by migration 0007's trigger) and its last write's random stamp (migration
    0008: a write after a restore never has a version a write before it had), as 16 hex
    digits. Three parts: never equal to an earlier release's "position.rev"."""
    return f"{position}.{rev}.{stamp & 0xFFFF_FFFF_FFFF_FFFF:016x}"


def utf8(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def delivery(delivery_id: str, plant_id: int, url: str, body: bytes, attempts: int,
             error: str | None, dead: bool) -> Delivery:
    return Delivery(delivery_id, plant_id, url, bytes(body), attempts, error, dead)


def plant(plant_id: int, name: bytes, tag: bytes | None) -> Plant:
    return Plant(plant_id, bytes(name).decode(), None if tag is None else bytes(tag).decode())
