"""The app and the stores know no server (issue 51): nothing under plant_store/http/ or
plant_store/stores/ reads a server's name (SERVER_SOFTWARE), uWSGI's module or environ keys,
or registers an at-fork hook of its own; a server's quirks live in plant_store/serving/ and
forks go through plant_store.util.at_fork. A process id may appear only as data."""

import pathlib
import re

import plant_store

PACKAGE = pathlib.Path(plant_store.__file__).parent
NEVER = re.compile(r"SERVER_SOFTWARE|uwsgi|register_at_fork|getppid|[\"']Granian[\"']")
# Where os.getpid() is data, not a test of "was I forked": each file and what the pid is.
PID_AS_DATA = {
    "stores/lock.py": "written into the lock file, and whose the held locks are",
    "stores/postgres/store.py": "in the connection's application_name",
}


def sources():
    for part in ("http", "stores"):
        for path in sorted((PACKAGE / part).rglob("*.py")):
            yield path.relative_to(PACKAGE).as_posix(), path.read_text()


def test_no_module_of_the_app_or_the_stores_asks_which_server_runs_it():
    found = [f"{name}:{text.count(chr(10), 0, match.start()) + 1}: {match.group()}"
             for name, text in sources() for match in NEVER.finditer(text)]
    assert not found, "a server's quirk belongs in plant_store/serving/: " + ", ".join(found)


def test_a_process_id_is_only_data_there():
    using = {name for name, text in sources() if "getpid" in text}
    assert using <= set(PID_AS_DATA), (
        "fork detection goes through plant_store.util.at_fork: "
        + ", ".join(sorted(using - set(PID_AS_DATA))))
    comparisons = [name for name, text in sources() if name != "stores/lock.py"
                   and re.search(r"getpid\(\)\s*[!=]=|[!=]=\s*os\.getpid\(\)", text)]
    assert not comparisons, comparisons
