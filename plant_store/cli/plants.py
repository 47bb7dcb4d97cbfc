"""Plants in and out of a store, by the operator, without a token or a server.

**Looking** (``plant-store plants list`` and ``get``): the stored plants, ids included,
read straight from the store, beside a running server too. The JSON-file store is read
without its lock, as ``plant-store check`` reads it: the file is append-only and a torn
last line is skipped. It shows what the file holds, so a create whose fsync is still under
way may show before its client hears 200. The PostgreSQL store is shared: it is opened
like any instance. The memory store lives inside its server's process only.

**Moving** (:func:`export` and :func:`import_lines`, run by ``plant-store export`` and
``import``): plants out of any store as JSON Lines, and into any store, for moving a data
set between stores.

Both speak only the Store interface. An export walks the pages in creation order and
writes one NewPlant per line (``{"id":..,"name":..,"tag":..}``, ``tag`` only when set),
exactly as orjson writes it. An import reads such lines, holds each to the API's limits
(``max_body_size``, read with that bound, and the NewPlant schema), and creates the plants
in file order. It is idempotent: a plant already stored is
a replay, counted and skipped, so an interrupted import is resumed by running it again. An
imported plant owes no webhook delivery: it is moved, not new.

The import is sequential, in batches (issue 37). Lines are read and checked up to BATCH
plants (or BATCH_BYTES of input), then the batch goes to ``Store.create_many``, which keeps
its order and returns once all of it is durable: one write and one fsync for the JSON
file, one COPY and one transaction for each 1,024 plants in PostgreSQL. (Creates from
several threads would enter the store in any order, and were not much faster: 8 threads
made 1.6 times one thread's plants a second into the JSON file.) Where the import stops
(a malformed or too long line, a conflict), the lines before it are created first, so
they are in the store and none after, as when each line was a create; Ctrl-C is heeded
between batches. A kill mid-batch leaves the batches before it stored, and perhaps a
prefix of it (PostgreSQL commits its transactions in order; the JSON file keeps the whole
lines written before the kill, and drops a torn last one when opened): the rerun counts
them as already there.
"""

import argparse
import contextlib
import os
import signal
import stat
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import BinaryIO, NamedTuple

from marshmallow import ValidationError

from plant_store import config, logs
from plant_store.cli.grammar import STORE, Commands, command, count, group
from plant_store.http import etags
from plant_store.http.schemas import (
    NotAnObject,
    describe,
    id_from_text,
    json_object,
    load_new_plant,
)
from plant_store.stores import BatchConflict, Store, StoreError, jsonfile, open_store
from plant_store.stores.records import INT64_MAX, INT64_MIN, Plant, Versioned, new_plant_json
from plant_store.util.files import replacing
from plant_store.util.words import counted


def register(commands: Commands) -> None:
    plants = group(commands, "plants", "look at the stored plants, with their ids",
                   "plants_command")
    listing = command(plants, "list", "list the plants in creation order: id, name, tag",
                      STORE, handler=list_plants)
    listing.add_argument("--limit", type=count, metavar="N", help="at most N plants")
    get = command(plants, "get", "show one plant as JSON, id included", STORE,
                  handler=get_plant)
    get.add_argument("id", metavar="ID", help="the plant's id")


def get_plant(args: argparse.Namespace, cfg: config.Config) -> int:
    plant_id = parse_id(args.id)
    found = fetch(cfg, plant_id)
    if found is None:
        print(f"plant-store: there is no plant with id {plant_id}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(encode(found.plant))
    sys.stdout.flush()
    # On stderr: stdout stays one NewPlant, as 'plants import' reads it.
    print(f"ETag: {etags.etag(found.version)}", file=sys.stderr)
    return 0


def list_plants(args: argparse.Namespace, cfg: config.Config) -> int:
    for plant in walk(cfg, args.limit):  # no tag, no field: an empty one is a tag
        tag = "" if plant.tag is None else f"\t{logs.escape(plant.tag)}"
        print(f"{plant.id}\t{logs.escape(plant.name)}{tag}")
    return 0


LOOK_PAGE = 1000  # plants a page while listing


def parse_id(text: str) -> int:
    plant_id = id_from_text(text)  # as the API reads one
    if plant_id is None:
        raise StoreError(f"id {text!r}: must be an integer from {INT64_MIN} to {INT64_MAX}")
    return plant_id


def walk(cfg: config.Config, limit: int | None = None) -> Iterator[Plant]:
    """The plants in creation order, at most ``limit`` of them."""
    if cfg.store == "jsonfile":
        yield from jsonfile.Snapshot(cfg.data_dir).walk(limit)
        return
    with _shared(cfg) as store:
        for plants in store.pages(LOOK_PAGE, limit):
            yield from plants


def fetch(cfg: config.Config, plant_id: int) -> Versioned | None:
    if cfg.store == "jsonfile":
        return jsonfile.Snapshot(cfg.data_dir).fetch(plant_id)
    with _shared(cfg) as store:
        return store.fetch(plant_id)


def _shared(cfg: config.Config) -> Store:
    """The shared store, read only: a schema that lacks migrations is refused, never
    migrated (a look at the plants mid rolling upgrade must not change the schema)."""
    if cfg.store == "memory":
        raise StoreError("store=memory keeps its plants inside its server's process only: "
                         "ask the server (GET /plants)")
    return open_store(cfg, migrate=False)


PAGE = 10_000  # plants a page while exporting: the per-page cost (a query, a lock) vanishes
# Plants a batch of the import, at most: each batch is an fsync (JSON file), so 10,000
# make the fsyncs a few per cent of the time; BATCH_BYTES bounds the memory a batch of
# long lines holds.
BATCH = 10_000
BATCH_BYTES = 8 << 20


class TransferError(Exception):
    """An export or import stopped; the message is one line for the operator."""


class Imported(NamedTuple):
    """What an import did: how many plants it created and how many it found stored already."""

    created: int  # plants this import created
    replayed: int  # plants that were already stored, the same


def export(store: Store, out: BinaryIO) -> int:
    """Write every plant of ``store`` to ``out`` in creation order; return how many.
    TransferError if the listing ended short of what the store holds: a PostgreSQL store
    lists no plant newer than a transaction still open on its server, and an export that
    silently left them out would lose them in a move (export with no writers running)."""
    count = 0
    for plants in store.pages(PAGE):
        out.write(b"".join(map(encode, plants)))
        count += len(plants)
    held = len(store) - count
    if held > 0:
        raise TransferError(
            f"exported {counted(count, 'plant')}, but the store holds {count + held}: the "
            "newest are not listed yet (with PostgreSQL, a transaction still open on its "
            "server holds them back: see pg_stat_activity); stop writers, end it, and export "
            "again")
    return count


def encode(plant: Plant) -> bytes:
    """One line: the NewPlant as orjson writes it, and ``\\n``."""
    return new_plant_json(plant, newline=True)


def import_lines(store: Store, source: BinaryIO, max_size: int) -> Imported:
    """Create the plant of each line of ``source`` in ``store``, in order. A line that is
    not a valid NewPlant, is longer than ``max_size`` bytes (a body the API would answer 413),
    or whose id is stored with another name or tag, stops the import there: TransferError
    names the line, and the lines before it are in the store."""
    created = 0
    batch: list[Plant] = []
    first = 1  # the line number of the batch's first plant

    def flush() -> None:
        """Create the batch, all of it or up to a conflict, which stops the import."""
        nonlocal created, first
        try:
            done = store.create_many(batch)
        except BatchConflict as exc:
            raise _stopped(first + len(exc.done), f"the store holds plant {exc.stored.id} "
                                                  "with a different name or tag") from None
        except StoreError as exc:
            raise _stopped(first, f"{exc}; run the import again to resume") from None
        created += sum(new for _, new in done)
        first += len(batch)
        batch.clear()

    with _interruptible() as interrupted:
        number = size = 0
        # A bounded read: a line without end (/dev/zero) would grow the process without end.
        while line := source.readline(max_size + 2):
            number += 1
            if not batch and interrupted.is_set():  # Ctrl-C: between two batches
                raise _stopped(number, "interrupted; run the import again to resume")
            try:
                if len(line) > max_size and len(line.removesuffix(b"\n")) > max_size:
                    raise _stopped(number, f"longer than max_body_size ({max_size} bytes), "
                                           "the largest body the API accepts")
                batch.append(decode(line, number))
            except TransferError:
                flush()  # the lines before it are in the store, as the message says
                raise
            size += len(line)
            if len(batch) >= BATCH or size >= BATCH_BYTES:
                flush()
                size = 0
        flush()
    return Imported(created, number - created)


@contextlib.contextmanager
def _interruptible() -> Iterator[threading.Event]:
    """SIGINT sets the event instead of raising in the middle of a create, where neither
    the store nor its driver can tell the client whether the create was made."""
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.set())
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


def decode(line: bytes, number: int) -> Plant:
    """The Plant of one line, held to the API's rules for a NewPlant body."""
    try:
        return load_new_plant(json_object(line, "a NewPlant"))
    except NotAnObject as exc:
        raise _stopped(number, str(exc)) from None
    except ValidationError as exc:
        raise _stopped(number, describe(exc)) from None


def _stopped(number: int, problem: str) -> TransferError:
    before = {1: "nothing before it is imported", 2: "the line before it is in the store"}
    done = before.get(number, f"the {number - 1} lines before it are in the store")
    return TransferError(f"import stopped at line {number} ({done}): {problem}")


def check_output(path: str, kept: Iterable[str] = ()) -> None:
    """TransferError unless an export may replace ``path`` (see :func:`output_file`);
    before the store is opened, so a refusal touches nothing."""
    try:
        directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise TransferError(f"cannot write {path}: {exc.strerror}") from None
    try:
        _check_in(directory, path, kept)
    finally:
        os.close(directory)


@contextlib.contextmanager
def output_file(path: str, kept: Iterable[str] = ()) -> Iterator[BinaryIO]:
    """A file written beside ``path`` and renamed over it once whole and on disk
    (``files.replacing``, which holds the directory by one descriptor throughout), so
    ``path`` never holds a partial export that could pass for a whole one; mode 0600 (an
    export is the whole data set). Only a regular file is replaced, or a name with nothing
    there: a rename over a device, a pipe or a link would put a file where ``/dev/null``
    or ``/dev/stdout`` was; and never one of ``kept``, the store's own files (an export
    over its journal would destroy what it read: the hostile passes on issue 42)."""
    try:
        with replacing(path, lambda directory, name: _check_in(directory, path, kept)) as out:
            yield out
    except OSError as exc:
        raise TransferError(f"cannot write {path}: {exc.strerror}") from None


def _check_in(directory: int, path: str, kept: Iterable[str]) -> None:
    """The checks of :func:`output_file`, made on the directory the descriptor holds."""
    name = os.path.basename(path)
    if not name or name in (".", ".."):
        raise TransferError(f"cannot write {path}: not a file name")
    try:
        mode = os.lstat(name, dir_fd=directory).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise TransferError(f"cannot write {path}: {exc.strerror}") from None
    if mode is not None and not stat.S_ISREG(mode):
        what = "a link" if stat.S_ISLNK(mode) else "not a regular file"
        raise TransferError(f"{path} is {what}: an export replaces only a regular file; to "
                            "write to a device or a pipe, use --output - (standard output)")
    here = os.fstat(directory)
    for own in kept:
        try:
            there = os.stat(os.path.dirname(os.path.abspath(own)))
        except OSError:
            continue
        if (there.st_dev, there.st_ino) == (here.st_dev, here.st_ino) and (
                os.path.basename(own) == name):
            raise TransferError(f"{path} is one of the store's own files: export elsewhere")
