"""plant_store.serving.metrics_directory: the service counts in a subdirectory it makes and
owns inside PROMETHEUS_MULTIPROC_DIR, and removes only what it made (issue 49); the real
servers are tests/integration/test_metrics_directory_live.py."""

import os
import re
import stat

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector

from plant_store.config import Config
from plant_store.metrics import archive as metrics_archive
from plant_store.serving import metrics_directory
from plant_store.serving.metrics_directory import (
    ENV,
    MAGIC,
    OWNER,
    DirectoryError,
    MetricsDirectory,
    OwnDirectory,
)
from plant_store.stores import StoreError
from support.metrics import write_worker


def names(directory):
    return sorted(path.name for path in directory.iterdir())


def test_a_start_counts_in_a_subdirectory_of_its_own_and_its_stop_removes_only_that(
        tmp_path):
    configured = tmp_path / "metrics"  # made when missing
    own = OwnDirectory(str(configured))
    assert os.path.dirname(own.path) == str(configured) and not os.path.exists(own.path)
    assert own.open() == own.path
    made = configured / own.name
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert (made / OWNER).read_bytes().startswith(MAGIC)
    (configured / "inventory.db").write_text("another program's")
    (configured / "link.db").symlink_to("inventory.db")
    write_worker(made, 12)
    assert metrics_archive.merge_ended(str(made), 12)
    write_worker(made, 13)
    own.close()
    assert names(configured) == ["inventory.db", "link.db"]
    assert (configured / "inventory.db").read_text() == "another program's"


def test_a_file_of_anothers_in_the_subdirectory_stays_and_so_does_the_subdirectory(tmp_path):
    own = OwnDirectory(str(tmp_path))
    made = tmp_path / os.path.basename(own.open())
    (made / "notes.txt").write_text("mine")
    (made / "counter_7.db").symlink_to(tmp_path / "elsewhere.db")  # a link: unlinked only
    (tmp_path / "elsewhere.db").write_text("kept")
    own.close()
    assert names(made) == ["notes.txt"]
    assert (tmp_path / "elsewhere.db").read_text() == "kept"


def test_a_configured_directory_that_is_a_link_or_cannot_be_made_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(DirectoryError, match=r"^a symbolic link; name the directory itself$"):
        OwnDirectory(str(tmp_path / "link")).open()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(DirectoryError, match="symbolic link"):
        OwnDirectory(str(tmp_path / "dangling")).open()
    (tmp_path / "file").touch()
    with pytest.raises(DirectoryError, match="Not a directory"):
        OwnDirectory(str(tmp_path / "file" / "metrics")).open()
    assert names(tmp_path / "real") == [] and not (tmp_path / "nowhere").exists()


def test_a_dead_starts_subdirectory_is_removed_and_nothing_else(tmp_path):
    """Removed: named as ours, marked, its lock free (its master gone). Kept: a live
    start's, one without the marker or with another's content in it, a link named as
    ours, and a file of another's inside the dead one."""
    dead = OwnDirectory(str(tmp_path))
    dead.open()
    write_worker(tmp_path / dead.name, 5)
    os.close(dead._owner)  # its master died: the lock goes with it
    dead._owner = None
    odd = OwnDirectory(str(tmp_path))
    odd.open()
    (tmp_path / odd.name / "notes.txt").write_text("someone's")
    os.close(odd._owner)
    odd._owner = None
    live = OwnDirectory(str(tmp_path))
    live.open()
    unmarked = tmp_path / "plant-store-metrics-1-0123456789abcdef"
    unmarked.mkdir()
    (unmarked / "counter_1.db").write_text("x")
    forged = tmp_path / "plant-store-metrics-2-0123456789abcdef"
    forged.mkdir()
    (forged / OWNER).write_text("not ours")
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / OWNER).write_bytes(MAGIC)
    (tmp_path / "plant-store-metrics-3-0123456789abcdef").symlink_to(tmp_path / "target")
    fifo = tmp_path / "plant-store-metrics-4-0123456789abcdef"
    fifo.mkdir()
    os.mkfifo(fifo / OWNER)  # read, it would hang the start
    before = names(tmp_path)
    later = OwnDirectory(str(tmp_path))
    later.open()
    try:
        after = names(tmp_path)
        assert dead.name not in after
        assert sorted(set(before) - {dead.name} | {later.name}) == after
        assert names(tmp_path / odd.name) == ["notes.txt"]  # its files went, not another's
        assert (tmp_path / live.name / OWNER).exists()
        assert names(unmarked) == ["counter_1.db"] and names(forged) == [OWNER]
        assert names(tmp_path / "target") == [OWNER] and names(fifo) == [OWNER]
    finally:
        later.close()
        live.close()


def test_a_path_named_as_ours_stands_for_its_parent(tmp_path):
    """A master started again by exec (gunicorn's USR2) inherits its predecessor's."""
    first = OwnDirectory(str(tmp_path))
    assert OwnDirectory(first.path).parent == str(tmp_path)


def test_a_directory_too_full_for_the_workers_is_refused_and_nothing_left(tmp_path,
                                                                         monkeypatch):
    monkeypatch.setattr(metrics_directory, "MIN_FREE", 1 << 62)
    with pytest.raises(DirectoryError, match="MiB free; the workers' metrics need at least"):
        OwnDirectory(str(tmp_path)).open()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(("given", "env", "used"), [
    ({}, False, False),  # one worker counts in its own memory
    ({"workers": 2, "store": "postgresql", "database_url": "x", "metrics": "off"}, False,
     False),
    ({"workers": 2, "store": "postgresql", "database_url": "x"}, False, True),
    ({}, True, True),  # named: used, even by one worker
])
def test_granians_directory_is_made_inside_the_one_named_and_left_as_found(
        tmp_path, monkeypatch, given, env, used):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    named = tmp_path / "named"
    if env:
        named.mkdir()
        monkeypatch.setenv(ENV, str(named))
        (named / "counter_1.db").write_bytes(b"another's")
    directory = MetricsDirectory(Config(server="granian", **given))
    path = directory.open()
    try:
        assert (path is not None) == used
        if used:
            assert os.environ[ENV] == path  # what the workers inherit
            assert os.path.dirname(path) == str(named if env else temp)
            assert os.listdir(path) == [OWNER]
    finally:
        directory.close()
    assert os.environ.get(ENV) == (str(named) if env else None)
    assert os.listdir(temp) == []
    if env:
        assert names(named) == ["counter_1.db"]


def test_granians_workers_counts_are_read_from_the_subdirectory(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path))
    directory = MetricsDirectory(
        Config(server="granian", workers=2, store="postgresql", database_url="x"))
    path = directory.open()
    for pid in (101, 102):
        counts = MmapedDict(os.path.join(path, f"counter_{pid}.db"))
        counts.write_value(mmap_key("r", "r_total", [], [], "h"), pid, 0.0)
        counts.close()
    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry, path)
    assert "r_total 203.0" in generate_latest(registry).decode()
    directory.close()
    assert os.listdir(tmp_path) == []


def test_granian_says_which_directory_it_refuses(tmp_path, monkeypatch):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.setenv(ENV, str(tmp_path / "link"))
    directory = MetricsDirectory(Config(server="granian"))
    says = re.escape(f"{ENV}={tmp_path / 'link'}: a symbolic link")
    with pytest.raises(StoreError, match=f"^{says}"):
        directory.open()
    assert os.environ[ENV] == str(tmp_path / "link")
