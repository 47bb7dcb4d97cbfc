"""The Containerfile: built, then run as its header says (a token made by ``token add`` in
the volume, the server on its own), it answers /health over HTTP, keeps a plant in the
volume across a stop and a new container, runs as an unprivileged user, and stops cleanly
on SIGTERM. Skipped without podman or docker, or without the base image on this machine:
the build pulls nothing but packages (set PLANT_STORE_TEST_BASE_IMAGE to a local Debian
bookworm image; the default is the Containerfile's)."""

import os
import pathlib
import re
import shutil
import subprocess
import time
import uuid

import pytest

from support.servers import http_request

ROOT = str(pathlib.Path(__file__).resolve().parents[2])
CONTAINERFILE = os.path.join(ROOT, "Containerfile")
DEFAULT_BASE = None  # a tree without the Containerfile collects all the same, and skips
if os.path.exists(CONTAINERFILE):
    with open(CONTAINERFILE) as _fh:
        DEFAULT_BASE = re.search(r"^ARG BASE=(\S+)$", _fh.read(), re.M).group(1)


def _engine():
    for name in ("podman", "docker"):
        path = shutil.which(name)
        if path and subprocess.run([path, "info"], capture_output=True,
                                   timeout=60).returncode == 0:
            return path
    return None


@pytest.fixture(scope="module")
def image():
    engine = _engine()
    if DEFAULT_BASE is None:
        pytest.skip("no Containerfile in this tree")
    if engine is None:
        pytest.skip("no working podman or docker")
    base = os.environ.get("PLANT_STORE_TEST_BASE_IMAGE", DEFAULT_BASE)
    if subprocess.run([engine, "image", "inspect", base], capture_output=True,
                      timeout=60).returncode != 0:
        pytest.skip(f"base image {base} is not on this machine: pull it, or set "
                    "PLANT_STORE_TEST_BASE_IMAGE to a local Debian bookworm image")
    tag = f"localhost/plant-store-test-{uuid.uuid4().hex[:12]}"
    build = subprocess.run([engine, "build", "--build-arg", f"BASE={base}", "-t", tag,
                            "-f", os.path.join(ROOT, "Containerfile"), ROOT],
                           capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    try:
        yield engine, tag
    finally:
        subprocess.run([engine, "rmi", "-f", tag], capture_output=True, timeout=120)


def _run(engine, *args, check=True):
    result = subprocess.run([engine, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 or not check, result.stderr
    return result


def _start(engine, tag, volume):
    """A detached container on the volume, published on a free port of 127.0.0.1."""
    name = f"plant-store-test-{uuid.uuid4().hex[:12]}"
    _run(engine, "run", "-d", "--name", name, "-v", f"{volume}:/data",
         "-p", "127.0.0.1::8080", tag)
    port = int(_run(engine, "port", name, "8080").stdout.split(":")[-1])
    deadline = time.monotonic() + 30
    while True:
        try:
            if http_request("127.0.0.1", port, "GET", "/health", timeout=2)[0] == 200:
                return name, port
        except OSError:
            pass
        assert time.monotonic() < deadline, _run(engine, "logs", name, check=False).stderr
        time.sleep(0.2)


def test_container_serves_and_keeps_its_plants_in_the_volume(image):
    engine, tag = image
    volume = f"plant-store-test-{uuid.uuid4().hex[:12]}"
    names = []
    try:
        token = _run(engine, "run", "--rm", "-v", f"{volume}:/data", tag,
                     "token", "add", "--label", "test").stdout.strip()
        name, port = _start(engine, tag, volume)
        names.append(name)
        assert http_request("127.0.0.1", port, "GET", "/health")[2] == {"status": "ok"}
        status, _, _ = http_request("127.0.0.1", port, "POST", "/plants",
                                    {"id": 1, "name": "Fern"}, token=token)
        assert status == 200
        assert _run(engine, "exec", name, "id", "-u").stdout.strip() != "0"
        _run(engine, "stop", "-t", "20", name)
        assert _run(engine, "inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip() == "0"
        logs = _run(engine, "logs", name)
        assert token not in logs.stdout + logs.stderr

        name, port = _start(engine, tag, volume)
        names.append(name)
        status, _, plants = http_request("127.0.0.1", port, "GET", "/plants", token=token)
        assert status == 200 and [p["name"] for p in plants] == ["Fern"]
    finally:
        for name in names:
            _run(engine, "rm", "-f", name, check=False)
        _run(engine, "volume", "rm", "-f", volume, check=False)
