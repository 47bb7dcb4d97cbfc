"""``plant-store export`` and ``plant-store import``, run as real commands: a round trip
keeps every byte and the creation order, an interrupted import resumes, and a bad or
conflicting line stops the import where it is.

The round trip moves PLANTS plants (5,000 by default, several pages of each size);
``PLANT_STORE_ROUNDTRIP_PLANTS=100000`` runs the issue's full size by hand.
"""

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from typing import NamedTuple

import orjson
import psycopg
import pytest

from plant_store.config import Config
from plant_store.stores import JsonFileStore, open_store
from plant_store.stores.records import Plant

PLANTS = int(os.environ.get("PLANT_STORE_ROUNDTRIP_PLANTS", "5000"))
TIMEOUT = 60 + PLANTS / 500  # seconds for one command; an import runs about 3,000 a second


class Destination(NamedTuple):
    """A store the commands are pointed at: its settings, and how many plants it has
    written so far, read from outside while an import holds it."""

    settings: dict
    written: object  # () -> int


def jsonfile_destination(request, where) -> Destination:
    def written():
        try:
            with open(where / "plants.jsonl", "rb") as fh:
                return fh.read().count(b"\n")
        except FileNotFoundError:
            return 0
    return Destination({"store": "jsonfile", "data_dir": str(where)}, written)


def postgresql_destination(request, where) -> Destination:
    url = request.getfixturevalue("database_url")

    def written():
        try:
            with psycopg.connect(url) as conn:
                return conn.execute("SELECT count(*) FROM plant_store_plants").fetchone()[0]
        except psycopg.errors.UndefinedTable:  # the import has not made the schema yet
            return 0
    return Destination({"store": "postgresql", "database_url": url,
                        "data_dir": str(where)}, written)


# Every kind of store an import is tested into.
DESTINATIONS = {"jsonfile": jsonfile_destination, "postgresql": postgresql_destination}


@pytest.fixture(params=sorted(DESTINATIONS))
def destination(request, tmp_path):
    return DESTINATIONS[request.param](request, tmp_path / "destination")


def flags(settings: dict) -> list[str]:
    return [arg for name, value in settings.items()
            for arg in ("--" + name.replace("_", "-"), str(value))]


def plant_store(*args, stdin=b"", timeout=TIMEOUT) -> subprocess.CompletedProcess:
    """Run a ``plant-store`` command; stdout is bytes, stderr text."""
    # At warning: the commands' own lines only, not a store's notes (a migration applied).
    result = subprocess.run([sys.executable, "-m", "plant_store", *map(str, args)],
                            input=stdin, capture_output=True, timeout=timeout,
                            env={**os.environ, "PLANT_STORE_LOG_LEVEL": "warning"})
    result.stderr = result.stderr.decode()
    return result


def one_error_line(result) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("plant-store: error: "), result.stderr
    return lines[0]


def pages(settings: dict, limit: int) -> list[list[Plant]]:
    """Every page of the store, walking its cursors."""
    with open_store(Config(**settings), lock_timeout=0) as store:
        walked, start = [], 0
        while start is not None:
            plants, start = store.page(start, limit)
            walked.append(plants)
    return walked


def listed(settings: dict) -> list[Plant]:
    return [plant for page in pages(settings, 1000) for plant in page]


def jsonl(plants) -> bytes:
    """The export's bytes, as the issue states them: orjson's, one ``\\n`` a line."""
    return b"".join(
        orjson.dumps({"id": p.id, "name": p.name} | ({} if p.tag is None else {"tag": p.tag}),
                     option=orjson.OPT_APPEND_NEWLINE) for p in plants)


NAMES = ["Monstera", "", "Fern \"Boston\"", "back\\slash", "tab\tnew\nline\x00", "Æble 🌿",
         "line\u2028separator", "x" * 300]


def fill_source(data_dir, count: int, seed: int = 16) -> list[Plant]:
    """A JSON-file store of ``count`` plants with ids all over int64, names and tags of every
    kind, and a tenth deleted, half of those created again (so they list as the newest);
    returns its plants in creation order. Built without fsync: only its content matters."""
    rng = random.Random(seed)
    ids = {-(2**63), 2**63 - 1, 0}
    while len(ids) < count * 21 // 20:
        ids.add(rng.randrange(-(2**63), 2**63))
    ids = sorted(ids, key=lambda _: rng.random())
    with JsonFileStore(str(data_dir), fsync=False, compact_share=0) as store:
        for n, plant_id in enumerate(ids[: count * 21 // 20]):
            tag = (None, "", "aroid", "Tåg")[n % 4]
            store.create(Plant(plant_id, f"{NAMES[n % len(NAMES)]} {n}", tag))
        deleted = ids[::10][: count // 20]
        for plant_id in deleted:
            assert store.delete(plant_id)
        for plant_id in deleted[::2]:
            store.create(Plant(plant_id, "again", None))
        while len(store) > count:  # trim to exactly ``count``
            store.delete(store.page(0, 1)[0][0].id)
        assert len(store) == count
    return listed({"store": "jsonfile", "data_dir": str(data_dir)})


def round_trip(tmp_path, destination: Destination, count: int) -> float:
    """JSON-file store -> export -> import into ``destination`` -> export: the same bytes,
    the same pages; returns the seconds the three commands took."""
    source = {"store": "jsonfile", "data_dir": str(tmp_path / "source")}
    expected = fill_source(source["data_dir"], count)
    first = tmp_path / "first.jsonl"

    began = time.monotonic()
    exported = plant_store("export", *flags(source), "--output", first)
    assert exported.returncode == 0 and exported.stderr == f"exported {count}\n"
    imported = plant_store("import", *flags(destination.settings), "--input", first)
    assert imported.returncode == 0, imported.stderr
    assert imported.stderr == f"imported {count}, already there 0\n"
    again = plant_store("export", *flags(destination.settings))  # to standard output
    took = time.monotonic() - began

    assert again.returncode == 0, again.stderr
    assert first.read_bytes() == jsonl(expected)  # creation order, orjson's bytes
    assert again.stdout == first.read_bytes()
    for limit in (1000, 7):
        assert pages(destination.settings, limit) == pages(source, limit)
    return took


@pytest.mark.slow
def test_round_trip_keeps_every_byte_and_the_order(tmp_path, destination):
    took = round_trip(tmp_path, destination, PLANTS)
    print(f"round trip of {PLANTS} plants: {took:.1f} s")


def test_export_of_an_empty_store_is_empty(tmp_path, destination):
    with open_store(Config(**destination.settings), lock_timeout=0):
        pass  # made, and empty
    result = plant_store("export", *flags(destination.settings))
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", "exported 0\n")
    empty = plant_store("import", *flags(destination.settings), stdin=b"")
    assert (empty.returncode, empty.stderr) == (0, "imported 0, already there 0\n")


def test_export_needs_an_existing_store(tmp_path):
    result = plant_store("export", "--data-dir", tmp_path / "typo")
    assert "no JSON-file store there" in one_error_line(result)
    assert not (tmp_path / "typo").exists()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_an_interrupted_import_is_resumed_by_running_it_again(tmp_path, destination, sig):
    count = 100_000  # ten batches of the import (transfer.BATCH): a signal lands part-way
    plants = [Plant(n, f"plant {n}", "t" if n % 3 else None) for n in range(count, 0, -1)]
    source = tmp_path / "plants.jsonl"
    source.write_bytes(jsonl(plants))
    importing = subprocess.Popen(
        [sys.executable, "-m", "plant_store", "import", *flags(destination.settings),
         "--input", source], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, "PLANT_STORE_LOG_LEVEL": "warning"})
    deadline = time.monotonic() + 60
    while destination.written() < 500:
        assert importing.poll() is None, importing.stderr.read()
        assert time.monotonic() < deadline, "the import made no progress"
        time.sleep(0.01)
    importing.send_signal(sig)
    assert importing.wait(10) == (-9 if sig == signal.SIGKILL else 2)
    if sig == signal.SIGINT:  # Ctrl-C: one line, no traceback
        lines = importing.stderr.read().decode().splitlines()
        assert len(lines) == 1 and lines[0].startswith("plant-store: error: import stopped "
                                                       "at line "), lines
        assert lines[0].endswith("interrupted; run the import again to resume")
    importing.stderr.close()

    done = listed(destination.settings)
    assert 500 <= len(done) < count  # killed part-way
    assert done == plants[: len(done)]  # a prefix of the file, in its order

    resumed = plant_store("import", *flags(destination.settings), stdin=source.read_bytes())
    assert resumed.returncode == 0, resumed.stderr
    # (A warning may come first, had the kill torn the last line.)
    assert resumed.stderr.splitlines()[-1] == (
        f"imported {count - len(done)}, already there {len(done)}")
    assert listed(destination.settings) == plants


def test_a_conflicting_line_stops_the_import_there(tmp_path, destination):
    with open_store(Config(**destination.settings), lock_timeout=0) as store:
        store.create(Plant(5, "Other"))
    plants = [Plant(n, f"plant {n}") for n in range(1, 10)]
    result = plant_store("import", *flags(destination.settings), stdin=jsonl(plants))
    assert one_error_line(result) == (
        "plant-store: error: import stopped at line 5 (the 4 lines before it are in the "
        "store): the store holds plant 5 with a different name or tag")
    assert listed(destination.settings) == [Plant(5, "Other"), *plants[:4]]


@pytest.mark.parametrize(("line", "problem"), [
    (b"not json", "not valid UTF-8 JSON"),
    (b"", "not valid UTF-8 JSON"),
    (b'{"id": 3, "name": "\xff"}', "not valid UTF-8 JSON"),
    (b'[{"id": 3, "name": "x"}]', "not a JSON object (a NewPlant)"),
    (b'{"id": true, "name": "x"}', "id: Must be an integer from -9223372036854775808 to "
                                   "9223372036854775807."),
    (b'{"id": 1e400, "name": "x"}', "id: Must be an integer from"),
    (b'{"id": 3.0, "name": "x"}', "id: Must be an integer from"),
    (b'{"id": 3}', "name: Missing data for required field."),
    (b'{"id": 3, "name": "x", "tag": null}', "tag: Field may not be null."),
])
def test_a_malformed_line_stops_the_import_naming_its_number(tmp_path, destination, line,
                                                              problem):
    lines = [b'{"id": 1, "name": "one"}', b'{"id": 2, "name": "two", "extra": [1]}', line,
             b'{"id": 4, "name": "four"}']
    result = plant_store("import", *flags(destination.settings), stdin=b"\n".join(lines) + b"\n")
    assert one_error_line(result).startswith(
        "plant-store: error: import stopped at line 3 (the 2 lines before it are in the "
        f"store): {problem}")
    assert listed(destination.settings) == [Plant(1, "one"), Plant(2, "two")]


@pytest.mark.parametrize("at", [1, 3])
def test_a_line_longer_than_max_body_size_stops_the_import(tmp_path, destination, at):
    """The API answers 413 to a body past max_body_size; an import held such a plant, and
    GET /plants then served it. A line of exactly the limit is a body of it: accepted."""
    limit = 100
    lines = [b'{"id": 1, "name": "one"}', b'{"id": 2, "name": "%s"}' % (b"x" * 79)]
    assert len(lines[1]) == limit
    lines.insert(at - 1, b'{"id": 3, "name": "%s"}' % (b"x" * 80))  # one byte more
    result = plant_store("import", *flags(destination.settings), "--max-body-size", limit,
                         stdin=b"\n".join(lines) + b"\n")
    before = {1: "nothing before it is imported", 3: "the 2 lines before it are in the store"}
    assert one_error_line(result) == (
        f"plant-store: error: import stopped at line {at} ({before[at]}): longer than "
        f"max_body_size ({limit} bytes), the largest body the API accepts")
    assert [p.id for p in listed(destination.settings)] == [1, 2][: at - 1]


def test_endless_input_without_a_newline_is_refused_at_once(tmp_path):
    """A line is read with a bound: /dev/zero through a pipe grew the import without end."""
    def run(data: bytes):
        importing = subprocess.Popen(
            [sys.executable, "-m", "plant_store", "import", "--data-dir", tmp_path / "data"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, bufsize=0)
        began = time.monotonic()
        with contextlib.suppress(BrokenPipeError):  # it stopped reading, as it should
            importing.stdin.write(data)
        importing.stdin.close()
        _, status, usage = os.wait4(importing.pid, 0)
        importing.returncode = os.waitstatus_to_exitcode(status)
        stderr = importing.stderr.read().decode()
        importing.stderr.close()
        return importing.returncode, stderr, time.monotonic() - began, usage.ru_maxrss * 1024

    code, stderr, _, baseline = run(b'{"id": 1, "name": "one"}\n')
    assert code == 0, stderr
    code, stderr, took, peak = run(bytes(200 << 20))  # 200 MB of zeros, no newline
    assert code == 2 and stderr.startswith("plant-store: error: import stopped at line 1 "
                                           "(nothing before it is imported): longer than "
                                           "max_body_size"), stderr
    assert took < 5
    assert peak < baseline + (20 << 20), f"{peak >> 20} MB at most, {baseline >> 20} MB for one"


def test_both_refuse_while_a_server_holds_the_store(tmp_path):
    data_dir = tmp_path / "data"
    with JsonFileStore(str(data_dir)):  # holds plants.lock as a running server does
        for command in (["export"], ["import"]):
            result = plant_store(*command, "--data-dir", data_dir, stdin=b'{"id":1,"name":"x"}\n',
                                 timeout=30)
            assert "is in use by another plant-store process" in one_error_line(result)
    assert listed({"store": "jsonfile", "data_dir": str(data_dir)}) == []
