"""No file in the data directory is opened through a symbolic link. The service user can
write there, and a link it planted would otherwise make root's ``serve``, ``export``,
``compact`` or ``import`` truncate and overwrite whatever the link points at."""

import os
import stat
import subprocess
import sys

import pytest

from plant_store.stores import JsonFileStore, StoreUnavailable
from plant_store.stores.records import Plant

PRECIOUS = b"root:x:0:0:precious\n"


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim"
    path.write_bytes(PRECIOUS)
    return path


@pytest.fixture
def data(tmp_path):
    """A data directory with one plant in it, its store closed."""
    with JsonFileStore(str(tmp_path / "data")) as store:
        store.create(Plant(1, "Fern"))
    return tmp_path / "data"


def plant_store(*args, stdin=b"", timeout=10):
    """Run a command; a server that (wrongly) starts is stopped after ``timeout``."""
    try:
        result = subprocess.run([sys.executable, "-m", "plant_store", *args], input=stdin,
                                capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return result


COMMANDS = {
    "serve": ["serve", "--port", "0"],
    "export": ["export", "--output", "-"],
    "compact": ["compact"],
    "import": ["import"],
}


def assert_refused(result, path):
    assert result is not None, "the command did not stop"
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 2, lines
    assert len(lines) == 1 and str(path) in lines[0], lines
    assert "is a symbolic link" in lines[0], lines


@pytest.mark.parametrize("name", ["plants.lock", "plants.jsonl"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_symlink_in_place_of_a_data_file_is_refused(data, victim, name, command):
    os.replace(data / name, data / "moved")
    os.symlink(victim, data / name)
    result = plant_store(*COMMANDS[command], "--data-dir", str(data),
                         stdin=b'{"id": 2, "name": "Aloe"}\n')
    assert victim.read_bytes() == PRECIOUS
    assert_refused(result, data / name)


def test_a_symlink_in_place_of_the_compaction_file_is_refused(tmp_path, victim):
    """Planted while the server runs (a start removes a stale one, link or not)."""
    with JsonFileStore(str(tmp_path / "data")) as store:
        store.create(Plant(1, "Fern"))
        store.delete(1)
        os.symlink(victim, tmp_path / "data" / "plants.jsonl.compact")
        with pytest.raises(StoreUnavailable, match=r"\.compact: it is a symbolic link"):
            store.compact()
        assert victim.read_bytes() == PRECIOUS
        assert not os.path.islink(store.path)
        store.create(Plant(2, "Aloe"))  # the old file is still in use
    assert plant_store("check", "--data-dir", str(tmp_path / "data")).returncode == 0


def test_a_symlink_in_place_of_the_token_files_is_refused(data, victim):
    for name in ("tokens.json", "tokens.json.lock"):
        os.symlink(victim, data / name)
        result = plant_store("token", "add", "--label", "ops", "--data-dir", str(data))
        assert victim.read_bytes() == PRECIOUS
        assert_refused(result, data / name)
        for made in ("tokens.json", "tokens.json.lock"):
            (data / made).unlink(missing_ok=True)


def test_a_symlinked_data_directory_is_refused(data, tmp_path):
    link = tmp_path / "link"
    os.symlink(data, link)
    for command in ("serve", "compact"):
        assert_refused(plant_store(*COMMANDS[command], "--data-dir", str(link)), link)


def test_an_export_over_a_symlink_is_refused_and_touches_neither(data, victim, tmp_path):
    """A rename never follows a link, but it would put a file where the link was: over
    /dev/stdout, a host's own link (the hostile pass on issue 42). Refused, both kept."""
    target = tmp_path / "export.jsonl"
    os.symlink(victim, target)
    result = plant_store("export", "--output", str(target), "--data-dir", str(data))
    assert result.returncode == 2 and b"is a link" in result.stderr, result.stderr
    assert victim.read_bytes() == PRECIOUS and os.readlink(target) == str(victim)


def test_an_export_over_a_device_a_pipe_or_the_store_is_refused(data, tmp_path):
    """The hostile pass on issue 42: export --output replaced /dev/full and /dev/stdout
    with regular files, and an export over plants.jsonl destroyed the journal."""
    device, pipe = tmp_path / "null", tmp_path / "fifo"
    (data / "tokens.json").write_text("{}")
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mkfifo(pipe)
    for target, says in [(device, "not a regular file"), (pipe, "not a regular file"),
                         (data / "plants.jsonl", "one of the store's own files"),
                         (data / "tokens.json", "one of the store's own files")]:
        before = os.lstat(target)
        result = plant_store("export", "--output", str(target), "--data-dir", str(data))
        assert result.returncode == 2 and says.encode() in result.stderr, (target, result.stderr)
        after = os.lstat(target)
        assert (after.st_mode, after.st_ino, after.st_size) == (
            before.st_mode, before.st_ino, before.st_size), target
    assert plant_store("check", "--data-dir", str(data)).returncode == 0




def test_an_export_over_the_configured_token_file_is_refused(data, tmp_path):
    """The second hostile pass on issue 42: export refused only the default token file,
    not the one token_file names (environment or INI), and replaced every token."""
    tokens = tmp_path / "elsewhere.json"
    tokens.write_text("{}")
    ini = tmp_path / "c.ini"
    ini.write_text(f"[plant-store]\ntoken_file = {tokens}\ndata_dir = {data}\n")
    for how in (["--config", str(ini)], ["--data-dir", str(data)]):
        env = {**os.environ, "PLANT_STORE_TOKEN_FILE": str(tokens)} if how[0] != "--config" \
            else None
        result = subprocess.run([sys.executable, "-m", "plant_store", "export", *how, "--output",
                                 str(tokens)], capture_output=True, text=True, env=env,
                                timeout=30)
        assert result.returncode == 2 and "store's own files" in result.stderr, result.stderr
        assert tokens.read_text() == "{}"
