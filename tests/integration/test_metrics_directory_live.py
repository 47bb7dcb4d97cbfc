"""The multiprocess metrics directory a user names (``PROMETHEUS_MULTIPROC_DIR``) is theirs:
the service counts in a subdirectory it makes there for each start and removes at its stop,
and touches nothing else (issue 49, finding 5). Real servers: ``plant-store serve --server
granian`` and gunicorn with the hooks."""

import os
import signal
import subprocess
import sys

import pytest

from support.metrics import samples, value
from support.prefork import WsgiServer
from support.servers import Server, free_port

GUNICORN = os.path.join(os.path.dirname(sys.executable), "gunicorn")
HOOKS = ("-c", "python:plant_store.gunicorn_hooks")
CREATES = ("plant_store_http_requests_total", {"route": "/plants", "method": "POST",
                                              "status": "200"})


def others_files(directory, outside):
    """Another program's files in ``directory``: a database, links to it and to a file
    outside, and a directory of its own; what they should read as."""
    (directory / "inventory.db").write_text("another program's\n")
    (directory / "link.db").symlink_to("inventory.db")
    (outside / "precious.db").write_text("outside\n")
    (directory / "outside.db").symlink_to(outside / "precious.db")
    (directory / "theirs").mkdir()
    (directory / "theirs" / "counter_1.db").write_text("theirs too\n")
    return snapshot(directory)


def snapshot(directory):
    """{name: (kind, content or link target)} of everything under ``directory``."""
    found = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = os.path.join(root, name)
            key = os.path.relpath(path, directory)
            if os.path.islink(path):
                found[key] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                found[key] = ("dir", None)
            else:
                with open(path, "rb") as fh:
                    found[key] = ("file", fh.read())
    return found


def granian(tmp_path, name, metrics_dir, *args):
    return Server(tmp_path / name, "--server", "granian", "--store", "memory", *args,
                  env={"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)})


def gunicorn(tmp_path, name, metrics_dir):
    data = tmp_path / name
    data.mkdir()
    return WsgiServer([GUNICORN, "-b", "127.0.0.1:{port}", *HOOKS, "-w", "1",
                       "plant_store.wsgi:application"], data,
                      {"PLANT_STORE_STORE": "memory", "PLANT_STORE_PROBE_PORT": str(free_port()),
                       "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)})


def creates_counted(server, token=None):
    if token is None:  # a gunicorn WsgiServer: its own token
        status, _, body = server.request("GET", "/metrics")
    else:
        status, _, body = server.request("GET", "/metrics", token=token)
    assert status == 200, body
    return value(samples(body.decode()), CREATES[0], **CREATES[1])


@pytest.mark.parametrize("server", ["granian", "gunicorn"])
def test_another_programs_files_in_the_directory_survive_a_start_and_a_stop(tmp_path, server):
    """Was: every ``*.db`` there deleted at the start, a link and another program's
    ``inventory.db`` among them."""
    metrics_dir, outside = tmp_path / "metrics", tmp_path / "outside"
    metrics_dir.mkdir()
    outside.mkdir()
    before = others_files(metrics_dir, outside)
    if server == "granian":
        with granian(tmp_path, "d", metrics_dir) as running:
            token = running.first_token
            assert running.request("POST", "/plants", {"id": 1, "name": "a"}, token)[0] == 200
            assert creates_counted(running, token) == 1
            during = snapshot(metrics_dir)
        assert running.proc.returncode == 0, "".join(running.stderr)
    else:
        with gunicorn(tmp_path, "d", metrics_dir) as running:
            assert running.create(1, "a")[0] == 200
            assert creates_counted(running) == 1
            during = snapshot(metrics_dir)
    assert {name: during[name] for name in before} == before  # nothing of theirs touched
    assert snapshot(metrics_dir) == before  # and nothing of the service's left behind
    assert (outside / "precious.db").read_text() == "outside\n"


@pytest.mark.parametrize("server", ["granian", "gunicorn"])
def test_two_services_sharing_a_directory_each_keep_their_own_counts(tmp_path, server):
    """Was: the second's start deleted the first's live files; the first's counts went to
    0, then counted the second's requests."""
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    if server == "granian":
        with granian(tmp_path, "one", metrics_dir) as first:
            one = first.first_token
            for n in range(5):
                assert first.request("POST", "/plants", {"id": n, "name": "a"}, one)[0] == 200
            assert creates_counted(first, one) == 5
            with granian(tmp_path, "two", metrics_dir) as second:
                two = second.first_token
                for n in range(3):
                    assert second.request("POST", "/plants", {"id": n, "name": "b"},
                                          two)[0] == 200
                assert creates_counted(second, two) == 3
                assert creates_counted(first, one) == 5
            assert creates_counted(first, one) == 5  # the second's stop took nothing of it
    else:
        with gunicorn(tmp_path, "one", metrics_dir) as first:
            for n in range(5):
                assert first.create(n, "a")[0] == 200
            assert creates_counted(first) == 5
            with gunicorn(tmp_path, "two", metrics_dir) as second:
                for n in range(3):
                    assert second.create(n, "b")[0] == 200
                assert creates_counted(second) == 3
                assert creates_counted(first) == 5
            assert creates_counted(first) == 5
    assert os.listdir(metrics_dir) == []


def refusal(command, env):
    """The stderr of a server that should refuse to start; it fails if it started."""
    proc = subprocess.Popen(command, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        raise AssertionError("started, the link followed:\n" + stderr) from None
    assert proc.returncode != 0, stderr
    return stderr


def test_a_metrics_directory_that_is_a_link_is_refused_in_one_line(tmp_path):
    """Was: followed, and the ``*.db`` of the directory it points to deleted."""
    real, link = tmp_path / "real", tmp_path / "metrics"
    real.mkdir()
    (real / "inventory.db").write_text("another program's\n")
    link.symlink_to(real)
    says = f"PROMETHEUS_MULTIPROC_DIR={link}: a symbolic link; name the directory itself"
    env = {"PROMETHEUS_MULTIPROC_DIR": str(link), "PLANT_STORE_STORE": "memory",
           "PLANT_STORE_DATA_DIR": str(tmp_path / "d")}
    served = refusal([sys.executable, "-m", "plant_store", "serve", "--server", "granian",
                      "--port", "0"], env)
    assert f"plant-store: error: {says}" in served, served
    assert len(served.strip().splitlines()) == 1, served
    hooked = refusal([GUNICORN, "-b", f"127.0.0.1:{free_port()}", *HOOKS,
                      "plant_store.wsgi:application"], env)
    assert f"plant-store: error: {says}" in hooked, hooked
    assert os.listdir(real) == ["inventory.db"]


def test_a_crashed_starts_subdirectory_is_removed_by_a_later_start_and_a_live_ones_never(
        tmp_path):
    """gunicorn killed outright (master and workers) leaves its subdirectory; the next
    start removes it (its marker's lock went with the processes), never a live one's."""
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    crashed = gunicorn(tmp_path, "one", metrics_dir)
    assert crashed.create(1, "a")[0] == 200
    left = {path.name for path in metrics_dir.iterdir()}
    os.killpg(crashed.proc.pid, signal.SIGKILL)
    crashed.stop()
    assert {path.name for path in metrics_dir.iterdir()} == left and len(left) == 1
    with gunicorn(tmp_path, "two", metrics_dir) as live:
        now = {path.name for path in metrics_dir.iterdir()}
        assert len(now) == 1 and not now & left  # the crashed one's gone, its own made
        with granian(tmp_path, "three", metrics_dir) as other:
            assert now < {path.name for path in metrics_dir.iterdir()}  # the live one kept
            assert creates_counted(other, other.first_token) == 0
        assert live.create(1, "b")[0] == 200
        assert creates_counted(live) == 1
    assert os.listdir(metrics_dir) == []
