"""The JSON-file store on real full and read-only filesystems, and shared by two servers.

A filesystem cannot be remounted read-only under a file open for writing, so a store that
turns read-only while running is covered by the injected faults of
tests/unit/stores/jsonfile/test_store.py.
"""

import os
import signal

from plant_store.stores import JsonFileStore
from plant_store.stores.records import Plant
from support import mounts
from support.journals import records
from support.servers import Server, run_cli


def fill(path, leave):
    """Fill a filesystem until only ``leave`` bytes are free; return the filler file."""
    filler = path / "filler"
    stat = os.statvfs(path)
    filler.write_bytes(b"\0" * max(0, stat.f_bavail * stat.f_frsize - leave))
    return filler


def test_disk_full_is_503_whole_records_and_recovery(tmp_path):
    with mounts.tmpfs(tmp_path / "fs", 1 << 20) as fs:
        data = fs / "data"
        with Server(data) as server:
            token = server.first_token
            filler = fill(fs, 64 * 1024)
            acked, statuses = [], []
            for i in range(200):
                body = {"id": i, "name": f"{i}:" + "n" * 2000}
                status, _, answer = server.request("POST", "/plants", body, token)
                statuses.append(status)
                if status == 200:
                    acked.append(i)
                else:
                    assert status == 503 and answer["error"] == 503
            assert 0 < len(acked) < 200 and statuses.count(503) == 200 - len(acked)
            assert len(records(data)) == len(acked)

            filler.unlink()  # space is back
            status, _, _ = server.request("POST", "/plants", {"id": 1000, "name": "x"}, token)
            assert status == 200
        with JsonFileStore(str(data)) as store:
            assert len(store) == len(acked) + 1
            assert all(store.get(i).name.startswith(f"{i}:") for i in acked)


def test_read_only_or_missing_data_directory_at_start_is_one_line(tmp_path):
    with mounts.tmpfs(tmp_path / "fs", 1 << 20) as fs:
        with JsonFileStore(str(fs / "data")) as store:
            store.create(Plant(1, "kept"))
        mounts.remount(fs, "ro")
        tokens = str(tmp_path / "tokens.json")
        for data_dir, expected in [
            (fs / "data", "cannot open lock file"),
            (fs / "missing", "cannot create data directory"),
        ]:
            result = run_cli("serve", "--port", "0", "--data-dir", str(data_dir),
                             "--token-file", tokens)
            assert result.returncode == 2
            assert result.stderr.splitlines() == [result.stderr.strip()]
            assert expected in result.stderr and "Read-only file system" in result.stderr
            assert f"setting data_dir='{data_dir}' (from flag --data-dir): " in result.stderr


def test_second_server_refuses_until_the_first_is_killed(tmp_path):
    first = Server(tmp_path)
    token = first.first_token
    second = run_cli("serve", "--data-dir", str(tmp_path), "--port", "0", "--lock-timeout", "0.2")
    assert second.returncode == 2
    assert f"in use by another plant-store process (PID {first.proc.pid})" in second.stderr
    first.stop(signal.SIGKILL)
    with Server(tmp_path) as third:
        assert third.request("POST", "/plants", {"id": 1, "name": "x"}, token)[0] == 200
