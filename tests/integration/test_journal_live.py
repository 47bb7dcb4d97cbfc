"""The real-server half of tests/unit/stores/jsonfile/test_journal.py: reading the JSON-file store
back: torn tails are cut, corruption refuses to start."""

import logging
import os

import pytest

from plant_store.stores import JsonFileStore
from plant_store.stores.jsonfile.journal import CorruptJournal
from plant_store.stores.records import Plant
from support.journals import records
from support.servers import run_cli

GOOD = (b'{"op":"create","id":1,"name":"Fern"}\n'
        b'{"op":"create","id":2,"name":"Palm","tag":"tree"}\n')


def write_journal(tmp_path, data):
    path = tmp_path / "plants.jsonl"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("tail", [
    b'{"op":"create","id":3,"na',            # died mid-append, no newline
    b'{"op":"create","id":3,"name":"x"}',    # whole JSON but no newline: never acknowledged
    b"\x00\x00\x00\x00",                     # zero-filled block after a power loss
    b'{"op":"create","id":3,"name"\n',       # invalid JSON on the last line
])
def test_torn_last_record_is_cut_with_a_warning(tmp_path, caplog, tail):
    path = write_journal(tmp_path, GOOD + tail)
    check = run_cli("check", "--data-dir", str(tmp_path))
    assert check.returncode == 0
    assert f"a torn last record of {len(tail)} bytes" in check.stdout
    assert path.read_bytes() == GOOD + tail  # check changes nothing

    caplog.set_level(logging.WARNING)
    with JsonFileStore(str(tmp_path)) as store:
        assert f"{path}: dropped {len(tail)} bytes of a torn last record" in caplog.text
        assert path.read_bytes() == GOOD
        assert (store.get(1), store.get(2), store.get(3)) == (
            Plant(1, "Fern"), Plant(2, "Palm", "tree"), None)
        store.create(Plant(3, "after"))
    assert records(path) == [*GOOD.splitlines(), b'{"op":"create","id":3,"name":"after"}']


@pytest.mark.parametrize(("data", "lineno"), [
    (b"garbage\n" + GOOD, 1),
    (GOOD[:10] + GOOD[40:] + b'{"op":"create","id":3,"name":"x"}\n', 1),
    (GOOD + b"\n" + b'{"op":"create","id":3,"name":"x"}\n', 3),
    (GOOD + b'{"op":"create","id":1,"name":"again"}\n' + GOOD[:37], 3),
    (GOOD + b'{"op":"create","id":"3","name":"x"}\n{"op":"create","id":4,"name":"y"}\n', 3),
    (GOOD + b'{"op":"create","id":3,"name":"x","tag":null}\n' + GOOD[:37], 3),
    (GOOD + b'{"op":"explode","id":3}\n' + GOOD[:37], 3),
    (GOOD + b'{"op":"delete","id":3}\n' + GOOD, 3),
    (GOOD + b'{"op":"delete","id":1}\n{"op":"delete","id":1}\n' + GOOD, 4),
    (GOOD + b'{"op":"delivery","id":"x","state":"delivered","error":null}\n' + GOOD, 3),
    (b'{"op":"create","id":3,"name":"x","webhooks":[{"id":"d","url":"u"}]}\n'
     b'{"op":"delivery","id":"d","state":"lost","error":null}\n' + GOOD, 2),
    (b'{"op":"create","id":3,"name":"x","webhooks":{"id":"d"}}\n' + GOOD, 1),
    (b'{"op":"outbox","id":"d","url":"u","body":{"id":1},"attempts":0,"error":null,'
     b'"dead":false}\n' + GOOD, 1),
    (b'{"op":"compacted","next_seq":-1}\n' + GOOD, 1),
])
def test_invalid_record_before_the_last_line_is_corruption(tmp_path, data, lineno):
    path = write_journal(tmp_path, data)
    before = os.stat(path)
    with pytest.raises(CorruptJournal) as raised:
        JsonFileStore(str(tmp_path))
    assert raised.value.lineno == lineno and raised.value.path == str(path)

    check = run_cli("check", "--data-dir", str(tmp_path))
    assert check.returncode == 2
    assert f"{path}: line {lineno} is corrupt" in check.stderr

    serve = run_cli("serve", "--data-dir", str(tmp_path), "--port", "0")
    assert serve.returncode == 2 and "Traceback" not in serve.stderr
    assert serve.stderr.strip().splitlines() == [f"plant-store: error: {raised.value}"]
    after = os.stat(path)
    assert path.read_bytes() == data and after.st_mtime_ns == before.st_mtime_ns


def test_check_reports_a_healthy_store(tmp_path):
    write_journal(tmp_path, GOOD)
    check = run_cli("check", "--data-dir", str(tmp_path))
    path = tmp_path / "plants.jsonl"
    assert (check.returncode, check.stdout.splitlines()) == (0, [
        f"{path}: 2 plants in {len(GOOD)} bytes; OK",
        f"{path}: 2 records, 0 webhook deliveries owed, 0 dead letters"])


