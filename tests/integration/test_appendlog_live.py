"""The real-server half of tests/unit/stores/jsonfile/test_appendlog.py: the append log's
invariants, tested directly with many threads: a waiter holds a ticket, never an offset, so
swaps and rollbacks cannot strand it; a failed fsync drops exactly the pending lines; a file
deleted or replaced under the log acknowledges nothing more."""

import os

from plant_store.stores import JsonFileStore
from plant_store.stores.jsonfile.store import DATA_FILE
from plant_store.stores.records import Plant
from support.forks import write_in_child
from support.servers import Server


def test_a_data_file_deleted_under_a_running_server_is_a_503_not_a_200(tmp_path):
    with Server(tmp_path) as server:
        token = server.first_token
        assert server.request("POST", "/plants", {"id": 1, "name": "a"}, token)[0] == 200
        (tmp_path / DATA_FILE).unlink()
        status, _, body = server.request("POST", "/plants", {"id": 2, "name": "b"}, token)
        assert status == 503 and body["error"] == 503
        status, _, body = server.request("GET", "/ready")
        assert status == 503 and "deleted" in body["message"]
        assert server.request("GET", "/health")[0] == 200  # it serves: alive, not ready
        assert "deleted under the running server" in "".join(server.stderr)


def test_a_store_inherited_across_fork_refuses_in_the_child(tmp_path):
    """A pre-fork server that opened the store before forking would have two writers."""
    with JsonFileStore(str(tmp_path)) as store:
        store.create(Plant(1, "parent's"))
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.write(write, write_in_child(store))
            finally:
                os._exit(0)  # never back into the test runner
        os.close(write)
        os.waitpid(pid, 0)
        outcome = os.read(read, 1000).decode()
        os.close(read)
        assert outcome.startswith("refused") and "before a fork" in outcome
        store.create(Plant(3, "parent's again"))  # the parent's lock and file are intact
    with JsonFileStore(str(tmp_path)) as store:
        assert [p.id for p in store.page(0, 10)[0]] == [1, 3]


