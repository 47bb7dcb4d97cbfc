"""``plant-store export`` and ``import`` in process: a memory store is refused before any
file is touched (issue 42, finding 6), and an export that fails leaves the file it would
have replaced as it was. tests/integration/test_export_import.py runs the real commands."""

import io
from contextlib import redirect_stderr, redirect_stdout

import pytest

from plant_store.cli import main
from plant_store.cli import plants as transfer
from plant_store.stores import JsonFileStore, MemoryStore
from plant_store.stores.records import Plant

BACKUP = b'{"id":1,"name":"Monstera"}\n{"id":2,"name":"Fern"}\n'


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("command,flag", [("export", "--output"), ("import", "--input")])
def test_the_memory_store_is_refused_before_any_file_is_touched(tmp_path, command, flag):
    # A CLI process's memory store is empty and goes with the process: an export would
    # replace a backup with nothing, an import would keep nothing.
    backup = tmp_path / "backup.jsonl"
    backup.write_bytes(BACKUP)
    data_dir = tmp_path / "data"
    status, out, err = run(command, "--store", "memory", "--data-dir", str(data_dir),
                           flag, str(backup))
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("plant-store: error: "), err
    assert "memory" in err and "store" in err
    assert backup.read_bytes() == BACKUP
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.jsonl"]  # no data_dir


class _ShortListing(MemoryStore):
    """A store that lists fewer plants than it holds, as a PostgreSQL store does while a
    transaction holds the newest back."""

    def __len__(self):
        return super().__len__() + 1


def test_an_export_that_fails_leaves_the_old_file_whole_and_no_temporary_file(tmp_path):
    backup = tmp_path / "backup.jsonl"
    backup.write_bytes(BACKUP)
    store = _ShortListing()
    store.create(Plant(3, "Pilea"))
    with (pytest.raises(transfer.TransferError, match="exported 1 plant, but the store holds 2"),
          transfer.output_file(str(backup)) as out):
        transfer.export(store, out)
    assert backup.read_bytes() == BACKUP
    assert [p.name for p in tmp_path.iterdir()] == ["backup.jsonl"]


def test_an_export_replaces_the_file_once_whole(tmp_path):
    backup = tmp_path / "backup.jsonl"
    backup.write_bytes(BACKUP)
    store = MemoryStore()
    store.create(Plant(3, "Pilea", "urticaceae"))
    with transfer.output_file(str(backup)) as out:
        assert transfer.export(store, out) == 1
        assert backup.read_bytes() == BACKUP  # still the old one while being written
    assert backup.read_bytes() == b'{"id":3,"name":"Pilea","tag":"urticaceae"}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["backup.jsonl"]


def test_a_directory_swapped_for_a_link_mid_export_cannot_move_it_onto_the_journal(tmp_path):
    """The second hostile pass on issue 42: the output's directory, checked by path, was
    swapped for a link to the data directory before the rename, and the export replaced
    plants.jsonl. Every step now names the directory by the descriptor the check opened."""
    data, out = tmp_path / "data", tmp_path / "out"
    with JsonFileStore(str(data)) as store:
        store.create(Plant(1, "Fern"))
    journal = (data / "plants.jsonl").read_bytes()
    out.mkdir()
    kept = [str(data / "plants.jsonl")]
    with transfer.output_file(str(out / "plants.jsonl"), kept) as written:
        written.write(b'{"id":1,"name":"Fern"}\n')
        out.rename(tmp_path / "moved")  # the swap, between the check and the rename
        (tmp_path / "out").symlink_to(data)
    assert (data / "plants.jsonl").read_bytes() == journal
    assert (tmp_path / "moved" / "plants.jsonl").read_bytes() == b'{"id":1,"name":"Fern"}\n'
    assert [p.name for p in (tmp_path / "moved").iterdir()] == ["plants.jsonl"]  # no temp left
    with pytest.raises(transfer.TransferError, match="one of the store's own files"):
        transfer.check_output(str(tmp_path / "out" / "plants.jsonl"), kept)
