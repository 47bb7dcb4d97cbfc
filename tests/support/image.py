"""The Containerfile built on a machine that reaches no image registry, and its image run
where the machine runs no container.

- The base: the Containerfile's (a public Debian image) when it is on this machine, else a
  Debian bookworm made here with debootstrap from the machine's own Debian mirror, kept as
  a tarball in CACHE (PLANT_STORE_CI_CACHE, default /var/cache/plant-store-ci) and
  imported once as LOCAL_BASE: a minute or two the first time, nothing afterwards.
- The build: podman's chroot isolation (a builder that needs no container runtime), with
  what the build needs from the host passed in, never baked into the Containerfile: the
  host's pip settings (its files and PIP_* variables) as one pip.conf mounted at the
  build's /etc/pip.conf, and every file or directory those settings name (the CA bundle a
  TLS-inspecting network needs, find-links, constraints) mounted read-only beside it.
- The run: a container when the runtime can start one; else the image's root filesystem
  (a created container's, mounted with ``podman mount``) with the image's entrypoint,
  user, working directory and environment started in a chroot, answering on loopback.
"""

import configparser
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid

CACHE = os.environ.get("PLANT_STORE_CI_CACHE", "/var/cache/plant-store-ci")
LOCAL_BASE = "localhost/plant-store-ci-base:bookworm"
SUITE = "bookworm"


def engine():
    """podman or docker, whichever answers ``info``; None when neither does."""
    for name in ("podman", "docker"):
        path = shutil.which(name)
        if path and subprocess.run([path, "info"], capture_output=True,
                                   timeout=60).returncode == 0:
            return path
    return None


def has_image(engine, name):
    return subprocess.run([engine, "image", "inspect", name], capture_output=True,
                          timeout=60).returncode == 0


def debian_mirror():
    """The Debian mirror this machine's apt uses (its deb822 or one-line sources)."""
    for path in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        try:
            with open(path) as fh:
                for line in fh:
                    words = line.split()
                    if words[:1] == ["URIs:"] or words[:1] == ["deb"]:
                        url = words[1] if words[0] == "URIs:" else words[-3]
                        if url.startswith("http"):
                            return url
        except (OSError, IndexError):
            continue
    return "http://deb.debian.org/debian"


def local_base(engine):
    """LOCAL_BASE, made (debootstrap) and imported when missing; or why it cannot be."""
    if has_image(engine, LOCAL_BASE):
        return LOCAL_BASE, None
    tarball = os.path.join(CACHE, f"debian-{SUITE}-minbase.tar")
    if not os.path.exists(tarball):
        debootstrap = shutil.which("debootstrap") or (
            "/usr/sbin/debootstrap" if os.path.exists("/usr/sbin/debootstrap") else None)
        if debootstrap is None or os.geteuid() != 0:
            return None, "no local Debian base image, and no debootstrap run as root to make one"
        os.makedirs(CACHE, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
            root = os.path.join(tmp, "root")
            made = subprocess.run([debootstrap, "--variant=minbase", SUITE, root,
                                   debian_mirror()], capture_output=True, text=True,
                                  timeout=1800)
            if made.returncode != 0:
                return None, f"debootstrap failed: {made.stdout[-2000:]}{made.stderr[-2000:]}"
            subprocess.run(["tar", "-C", root, "-cf", tarball + ".part", "."], check=True,
                           timeout=600)
            os.replace(tarball + ".part", tarball)
    imported = subprocess.run([engine, "import", tarball, LOCAL_BASE], capture_output=True,
                              text=True, timeout=600)
    if imported.returncode != 0:
        return None, f"{engine} import failed: {imported.stderr[-2000:]}"
    return LOCAL_BASE, None


def pip_settings():
    """The host's pip settings, files and PIP_* variables (which win), by section.key."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                            capture_output=True, text=True, timeout=60)
    settings = {}
    for line in listed.stdout.splitlines():
        key, _, value = line.partition("=")
        if key and value and not key.startswith(":env:."):  # read below, as pip does
            settings[key] = value.strip().strip("'\"")
    for name, value in os.environ.items():
        if name.startswith("PIP_") and value:
            settings["global." + name[4:].lower().replace("_", "-")] = value
    return settings


def pip_mounts(directory):
    """``--volume`` arguments that give a build the host's pip settings: a pip.conf
    written in ``directory`` at /etc/pip.conf, and each host path it names at
    /run/host-pip/N (the build's own copy of a path, say its CA bundle, may be a file a
    package writes, so none is mounted over). A local index (file://.../simple) is mounted
    with its parent: its pages link to files beside it (../../files/...)."""
    config, volumes, mounted = configparser.ConfigParser(interpolation=None), [], {}
    for key, value in sorted(pip_settings().items()):
        section, _, option = key.partition(".")
        words = []
        for word in value.split():
            path = word.removeprefix("file://").rstrip("/")
            if not path.startswith("/"):
                words.append(word)  # a URL: the build reaches it as the host does
                continue
            if not os.path.exists(path):
                continue  # named but absent here: nothing to pass
            index = option.endswith("index-url")
            source = os.path.dirname(path) if index else path
            if source not in mounted:
                mounted[source] = f"/run/host-pip/{len(mounted)}"
                volumes += ["--volume", f"{source}:{mounted[source]}:ro"]
            inside = mounted[source] + (f"/{os.path.basename(path)}" if index else "")
            words.append(word.replace(path, inside))
        if words:
            if not config.has_section(section):
                config.add_section(section)
            config.set(section, option, " ".join(words))
    pip_conf = os.path.join(directory, "pip.conf")
    with open(pip_conf, "w") as fh:
        config.write(fh)
    return ["--volume", f"{pip_conf}:/etc/pip.conf:ro", *volumes]


def build(engine, base, root, tag, scratch):
    """``engine build`` of ``root``'s Containerfile on ``base``: the completed process."""
    command = [engine, "build", "--build-arg", f"BASE={base}", "-t", tag,
               "-f", os.path.join(root, "Containerfile")]
    if os.path.basename(engine) == "podman":  # docker's build takes no --volume
        command += ["--isolation", "chroot", *pip_mounts(scratch)]
    return subprocess.run([*command, root], capture_output=True, text=True, timeout=1800)


def runs_containers(engine, tag):
    """None when ``engine run`` starts a container of ``tag``, else why it cannot."""
    tried = subprocess.run([engine, "run", "--rm", "--entrypoint", "/bin/true", tag],
                           capture_output=True, text=True, timeout=120)
    return None if tried.returncode == 0 else tried.stderr.strip()[-500:]


class Rootfs:
    """The image's root filesystem (a created container's, so writable and kept across
    starts, as a volume is), its entrypoint run in a chroot as the image's user."""

    def __init__(self, engine, tag):
        self.engine = engine
        self.container = subprocess.run(
            [engine, "create", "--name", f"plant-store-test-{uuid.uuid4().hex[:12]}", tag],
            capture_output=True, text=True, timeout=120, check=True).stdout.strip()
        self.root = subprocess.run([engine, "mount", self.container], capture_output=True,
                                   text=True, timeout=120, check=True).stdout.strip()
        inspected = subprocess.run([engine, "image", "inspect", tag], capture_output=True,
                                   text=True, timeout=120, check=True).stdout
        self.config = json.loads(inspected)[0]["Config"]

    def user(self):
        """(uid, gid) of the image's USER, from the image's own /etc/passwd."""
        name = self.config.get("User") or "root"
        with open(os.path.join(self.root, "etc/passwd")) as fh:
            for line in fh:
                fields = line.split(":")
                if name in (fields[0], fields[2]):
                    return int(fields[2]), int(fields[3])
        raise LookupError(f"no user {name} in the image")

    def popen(self, args=None, env=None, **kwargs):
        """The image's entrypoint with ``args`` (default: its CMD), in the chroot."""
        uid, gid = self.user()
        workdir = self.config.get("WorkingDir") or "/"
        image_env = dict(item.split("=", 1) for item in self.config.get("Env", []))

        def enter():
            os.chroot(self.root)
            os.chdir(workdir)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)

        argv = [*self.config["Entrypoint"], *(self.config.get("Cmd") or []
                                              if args is None else args)]
        return subprocess.Popen(argv, env={**image_env, **(env or {})}, preexec_fn=enter,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, **kwargs)

    def stop_signal(self):
        return getattr(signal, self.config.get("StopSignal") or "SIGTERM")

    def close(self):
        subprocess.run([self.engine, "umount", self.container], capture_output=True,
                       timeout=120)
        subprocess.run([self.engine, "rm", "-f", self.container], capture_output=True,
                       timeout=120)

