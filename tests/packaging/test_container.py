"""The Containerfile, built (tests/support/image.py: on the Containerfile's base when it is
on this machine, else on a Debian base made here with debootstrap; the host's pip settings
and CA bundle mounted into the build, not baked in), then run as its header says: a token
made by ``token add`` in the volume, the server on its own, it answers /health over HTTP,
keeps a plant in the volume across a stop and a new start, runs as an unprivileged user,
prints no token, and stops cleanly on its stop signal.

Run twice where the machine allows: as a container, and from the image's root filesystem
in a chroot (the same files, entrypoint, user, working directory and environment; only
the runtime is left out), which is all a machine whose runtime cannot start a container
can check (``crun: setrlimit RLIMIT_NOFILE: Operation not permitted`` in some VMs).
Slow (a build of a minute or two, debootstrap's first base a minute more): .ci/run runs
it in its second pass, and installs podman and debootstrap for it. Skipped only without a
working podman or docker (in CI, ``CI=true``, it fails instead), or without a base image
and the debootstrap to make one. PLANT_STORE_TEST_BASE_IMAGE names another local Debian
bookworm image to build on."""

import os
import pathlib
import re
import subprocess
import tempfile
import time
import uuid

import pytest

from support import image as images
from support.needs import needed
from support.servers import free_port, http_request

pytestmark = pytest.mark.slow

ROOT = str(pathlib.Path(__file__).resolve().parents[2])
CONTAINERFILE = os.path.join(ROOT, "Containerfile")
DEFAULT_BASE = None  # a tree without the Containerfile collects all the same, and skips
if os.path.exists(CONTAINERFILE):
    with open(CONTAINERFILE) as _fh:
        DEFAULT_BASE = re.search(r"^ARG BASE=(\S+)$", _fh.read(), re.M).group(1)


@pytest.fixture(scope="module")
def image():
    if DEFAULT_BASE is None:
        pytest.skip("no Containerfile in this tree")
    engine = needed(images.engine(), "no working podman or docker", "podman, debootstrap",
                    "container")
    base = os.environ.get("PLANT_STORE_TEST_BASE_IMAGE")
    if base is None and images.has_image(engine, DEFAULT_BASE):
        base = DEFAULT_BASE
    if base is None:
        base, why = images.local_base(engine)
        needed(base, why, "debootstrap", "container")
    tag = f"localhost/plant-store-test-{uuid.uuid4().hex[:12]}"
    with tempfile.TemporaryDirectory() as scratch:
        build = images.build(engine, base, ROOT, tag, scratch)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    try:
        yield engine, tag
    finally:
        subprocess.run([engine, "rmi", "-f", tag], capture_output=True, timeout=120)


def _run(engine, *args, check=True):
    result = subprocess.run([engine, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 or not check, result.stderr
    return result


def _answering(port, logs):
    """Until /health answers on ``port``; ``logs()`` says why not, if it never does."""
    deadline = time.monotonic() + 60
    while True:
        try:
            if http_request("127.0.0.1", port, "GET", "/health", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, logs()
        time.sleep(0.2)


class Containers:
    """The image run as containers on a named volume, published on 127.0.0.1."""

    def __init__(self, engine, tag):
        why = images.runs_containers(engine, tag)
        if why:
            pytest.skip(f"{engine} builds here but cannot run a container: {why} (the "
                        "image is run from its root filesystem instead)")
        self.engine, self.tag = engine, tag
        self.volume = f"plant-store-test-{uuid.uuid4().hex[:12]}"
        self.names = []

    def token(self):
        return _run(self.engine, "run", "--rm", "-v", f"{self.volume}:/data", self.tag,
                    "token", "add", "--label", "test").stdout.strip()

    def start(self):
        name = f"plant-store-test-{uuid.uuid4().hex[:12]}"
        _run(self.engine, "run", "-d", "--name", name, "-v", f"{self.volume}:/data",
             "-p", "127.0.0.1::8080", self.tag)
        self.names.append(name)
        port = int(_run(self.engine, "port", name, "8080").stdout.split(":")[-1])
        _answering(port, lambda: _run(self.engine, "logs", name, check=False).stderr)
        return name, port

    def uid(self, name):
        return _run(self.engine, "exec", name, "id", "-u").stdout.strip()

    def stop(self, name):
        """Stop it; its exit code and everything it logged."""
        _run(self.engine, "stop", "-t", "20", name)
        code = _run(self.engine, "inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip()
        logs = _run(self.engine, "logs", name)
        return int(code), logs.stdout + logs.stderr

    def close(self):
        for name in self.names:
            _run(self.engine, "rm", "-f", name, check=False)
        _run(self.engine, "volume", "rm", "-f", self.volume, check=False)


class Chroot:
    """The image's root filesystem, its entrypoint started in a chroot on a free port of
    127.0.0.1 (PLANT_STORE_HOST and PLANT_STORE_PORT over the image's own)."""

    def __init__(self, engine, tag):
        if os.geteuid() != 0 or os.path.basename(engine) != "podman":
            pytest.skip("the image's root filesystem is mounted by podman, as root")
        self.rootfs = images.Rootfs(engine, tag)
        self.processes = []

    def token(self):
        made = self.rootfs.popen(["token", "add", "--label", "test"])
        out, err = made.communicate(timeout=120)
        assert made.returncode == 0, err
        return out.strip()

    def start(self):
        port = free_port()
        process = self.rootfs.popen(env={"PLANT_STORE_HOST": "127.0.0.1",
                                         "PLANT_STORE_PORT": str(port)})
        self.processes.append(process)

        def logs():
            if process.poll() is None:
                return "still starting"
            return process.communicate()[1][-3000:]

        _answering(port, logs)
        return process, port

    def uid(self, process):
        with open(f"/proc/{process.pid}/status") as fh:
            return re.search(r"^Uid:\s+(\d+)", fh.read(), re.M).group(1)

    def stop(self, process):
        process.send_signal(self.rootfs.stop_signal())
        out, err = process.communicate(timeout=30)
        return process.returncode, out + err

    def close(self):
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
        self.rootfs.close()


@pytest.mark.parametrize("runner", [Containers, Chroot])
def test_image_serves_and_keeps_its_plants_in_the_volume(image, runner):
    engine, tag = image
    run = runner(engine, tag)
    try:
        token = run.token()
        server, port = run.start()
        assert http_request("127.0.0.1", port, "GET", "/health")[2] == {"status": "ok"}
        status, _, _ = http_request("127.0.0.1", port, "POST", "/plants",
                                    {"id": 1, "name": "Fern"}, token=token)
        assert status == 200
        assert run.uid(server) != "0"
        code, logs = run.stop(server)
        assert code == 0, logs
        assert token not in logs

        server, port = run.start()
        status, _, plants = http_request("127.0.0.1", port, "GET", "/plants", token=token)
        assert status == 200 and [p["name"] for p in plants] == ["Fern"]
        assert run.stop(server)[0] == 0
    finally:
        run.close()


def test_the_image_keeps_nothing_of_the_hosts_pip_settings(image):
    """What the build was lent (pip.conf, the CA bundle, local indexes) stays on the host:
    at most the empty mount points podman leaves behind."""
    engine, tag = image
    if os.geteuid() != 0 or os.path.basename(engine) != "podman":
        pytest.skip("the image's root filesystem is mounted by podman, as root")
    rootfs = images.Rootfs(engine, tag)
    try:
        pip_conf = os.path.join(rootfs.root, "etc/pip.conf")
        assert not os.path.exists(pip_conf) or os.path.getsize(pip_conf) == 0
        lent = [os.path.join(top, name)
                for top, _, names in os.walk(os.path.join(rootfs.root, "run/host-pip"))
                for name in names]
        assert [path for path in lent if os.path.getsize(path)] == []
        assert not os.path.exists(os.path.join(rootfs.root, "src"))
    finally:
        rootfs.close()
