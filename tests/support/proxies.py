"""Reverse proxies in front of the service, each running the example shipped in conf/ with
only its ports (and, for Apache, its temporary paths) replaced: nginx, Apache httpd, Caddy
and HAProxy, as real processes.

Every example terminates TLS: each harness gives its proxy a certificate for 127.0.0.1
signed by a throwaway CA (:func:`certificates`, made with openssl once per test session),
and its client verifies it. Each harness takes a directory of its own and the service's
port(s), and offers ``port`` (HTTPS), ``http_port`` (the example's port 80, which only
redirects), ``base`` (``https://127.0.0.1:<port>``), ``request(...)`` over HTTPS and
``plain_request(...)`` to ``http_port`` (as :func:`serverproc.http_request`), ``connect()``
(a socket, TLS established), ``stop()`` and ``with``. Each waits at most 10 s for its proxy
to listen, and raises with the proxy's log when it does not.
"""

import atexit
import base64
import contextlib
import functools
import hashlib
import os
import pathlib
import pwd
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time

from support.servers import free_port, http_request

CONF = pathlib.Path(__file__).parents[2] / "conf"
START_TIMEOUT = 10


def _binary(name, *paths):
    return shutil.which(name) or next((p for p in paths if os.access(p, os.X_OK)), None)


NGINX = _binary("nginx", "/usr/sbin/nginx", "/usr/local/sbin/nginx")
APACHE = _binary("apache2", "/usr/sbin/apache2")
APACHE_MODULES = "/usr/lib/apache2/modules"
CADDY = _binary("caddy", "/usr/bin/caddy")
HAPROXY = _binary("haproxy", "/usr/sbin/haproxy")
OPENSSL = _binary("openssl", "/usr/bin/openssl")


class Certificates:
    """A throwaway CA, and a certificate it signed for 127.0.0.1 and localhost (P-256 keys:
    cheap handshakes), in ``directory``: ``ca``, ``cert`` and ``key`` are their paths."""

    def __init__(self, directory):
        self.dir = pathlib.Path(directory)
        self.ca, self.cert, self.key = (self.dir / name for name in ("ca.crt", "tls.crt",
                                                                     "tls.key"))
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-noenc"]
        self._openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
                      "-subj", "/CN=Plant Store tests CA",
                      "-addext", "basicConstraints=critical,CA:TRUE",
                      "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        self._openssl("req", *ec, "-keyout", "tls.key", "-out", "tls.csr",
                      "-subj", "/CN=127.0.0.1")
        (self.dir / "tls.ext").write_text(
            "subjectAltName = IP:127.0.0.1, DNS:localhost\nbasicConstraints = CA:FALSE\n"
            "keyUsage = critical, digitalSignature\nextendedKeyUsage = serverAuth\n"
            "subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n")
        self._openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                      "-CAcreateserial", "-days", "2", "-extfile", "tls.ext", "-out", "tls.crt")

    def _openssl(self, *args):
        subprocess.run([OPENSSL, *args], cwd=self.dir, check=True, capture_output=True)

    @functools.cached_property
    def spki(self):
        """The base64 SHA-256 of the certificate's public key, as Chromium's
        ``--ignore-certificate-errors-spki-list`` takes it (it trusts no CA file)."""
        key = subprocess.run([OPENSSL, "x509", "-in", str(self.cert), "-noout", "-pubkey"],
                             check=True, capture_output=True).stdout
        der = subprocess.run([OPENSSL, "pkey", "-pubin", "-outform", "der"], input=key,
                             check=True, capture_output=True).stdout
        return base64.b64encode(hashlib.sha256(der).digest()).decode()

    def context(self):
        """A client's context that trusts this CA only, and checks the name."""
        return ssl.create_default_context(cafile=str(self.ca))

    def install(self, directory, user=None):
        """Copies of the certificate and key in ``directory`` (``tls.crt``, ``tls.key``, and
        both in ``tls.pem`` for HAProxy), readable by ``user`` when given: (crt, key, pem)."""
        directory = pathlib.Path(directory)
        cert, key = self.cert.read_bytes(), self.key.read_bytes()
        paths = [directory / name for name in ("tls.crt", "tls.key", "tls.pem")]
        for path, data in zip(paths, (cert, key, cert + key), strict=True):
            path.write_bytes(data)
            path.chmod(0o600)
            if user is not None:
                os.chown(path, user.pw_uid, user.pw_gid)
        return paths


@functools.cache
def certificates():
    """The session's :class:`Certificates`, made on first use, removed at exit."""
    directory = tempfile.mkdtemp(prefix="plant-store-tls-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return Certificates(directory)


def _replace(text, old, new, count=1):
    """``text`` with ``old`` replaced by ``new``, exactly ``count`` times (the example
    changed and the harness no longer fits it: fail rather than run something else)."""
    found = text.count(old)
    if found != count:
        raise AssertionError(f"{old!r} is in the example {found} times, not {count}")
    return text.replace(old, new)


class Proxy:
    """A proxy process, its output in ``<dir>/output.log``."""

    name = "proxy"

    def _start(self, command, *, env=None, user=None, stop_signal=signal.SIGTERM):
        self.stop_signal = stop_signal
        self.log = self.dir / "output.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.dir, env={**os.environ, **(env or {})}, start_new_session=True,
                **({"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
                   if user else {}))
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._listening():
                return
            if self._ended():
                break
            time.sleep(0.05)
        output = self.output()
        self.stop()
        raise AssertionError(f"{self.name} did not start:\n{output}")

    def output(self):
        """What the proxy wrote (its log files too)."""
        return "\n".join(path.read_text(errors="replace")
                         for path in sorted(self.dir.glob("*.log")))

    @property
    def base(self):
        return f"https://127.0.0.1:{self.port}"

    def request(self, *args, **kwargs):
        """A request over HTTPS, the certificate verified."""
        return http_request("127.0.0.1", self.port, *args, context=certificates().context(),
                            **kwargs)

    def plain_request(self, *args, **kwargs):
        """A request over plain HTTP, to the example's port 80."""
        return http_request("127.0.0.1", self.http_port, *args, **kwargs)

    def connect(self, timeout=5, source=None):
        """A socket to the HTTPS port, the TLS handshake done."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=timeout,
                                        source_address=(source, 0) if source else None)
        return certificates().context().wrap_socket(sock, server_hostname="127.0.0.1")

    def _listening(self):
        for port in (self.port, self.http_port):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) != 0:
                    return False
        return True

    def stop(self):
        """Stop the proxy, and anything it left in its session, within about 15 s."""
        if self.proc.returncode is None:  # not reaped (poll() reaps)
            os.kill(self.proc.pid, self.stop_signal)  # not send_signal(): it would reap
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not self._ended():
                time.sleep(0.05)
            # Not yet reaped, so its group id is still ours: end what it left, and only that.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5)

    def _ended(self):
        return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.stop()


NGINX_MAIN = """daemon off;
master_process off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 1024; }}  # the slow-client test holds ~350
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    include {tmp}/plant-store.conf;
}}
"""


class Nginx(Proxy):
    """conf/nginx.conf.example in front of the service at ``upstream_ports``: one for the
    JSON-file store, several instances for PostgreSQL (each listed in the upstream block);
    ``http_context``: directives for the http {} context that includes the example."""

    name = "nginx"
    example = CONF / "nginx.conf.example"

    def __init__(self, tmp, *upstream_ports, http_context=""):
        self.dir = pathlib.Path(tmp)
        self.port, self.http_port = free_port(), free_port()
        cert, key, _ = certificates().install(self.dir)
        site = self.example.read_text()
        site = _replace(site, "server 127.0.0.1:8080;", " ".join(
            f"server 127.0.0.1:{port};" for port in upstream_ports))
        site = _replace(site, "listen 80;", f"listen 127.0.0.1:{self.http_port};")
        site = _replace(site, "listen 443 ssl;", f"listen 127.0.0.1:{self.port} ssl;")
        site = _replace(site, "/etc/letsencrypt/live/plants.example.com/fullchain.pem", str(cert))
        site = _replace(site, "/etc/letsencrypt/live/plants.example.com/privkey.pem", str(key))
        (self.dir / "plant-store.conf").write_text(site)
        main = NGINX_MAIN.format(tmp=self.dir)
        if http_context:
            main = _replace(main, "    include ", f"    {http_context}\n    include ")
        (self.dir / "nginx.conf").write_text(main)
        self._start([NGINX, "-c", str(self.dir / "nginx.conf"), "-p", str(self.dir)])


# What a Debian apache2.conf would otherwise provide: the modules the example names, and
# everything in a directory of the test's own.
APACHE_MAIN = """ServerRoot {tmp}
PidFile {tmp}/httpd.pid
DefaultRuntimeDir {tmp}
ErrorLog {tmp}/error.log
LogLevel warn
ServerName 127.0.0.1
Listen 127.0.0.1:{port}
Listen 127.0.0.1:{http_port}
StartServers 1
LoadModule ssl_module {modules}/mod_ssl.so
LoadModule socache_shmcb_module {modules}/mod_socache_shmcb.so
SSLSessionCache shmcb:{tmp}/ssl_scache(512000)
LoadModule rewrite_module {modules}/mod_rewrite.so
LoadModule mpm_event_module {modules}/mod_mpm_event.so
LoadModule authz_core_module {modules}/mod_authz_core.so
LoadModule proxy_module {modules}/mod_proxy.so
LoadModule proxy_http_module {modules}/mod_proxy_http.so
LoadModule headers_module {modules}/mod_headers.so
LoadModule reqtimeout_module {modules}/mod_reqtimeout.so
LoadModule alias_module {modules}/mod_alias.so
LoadModule unique_id_module {modules}/mod_unique_id.so
Include {tmp}/plant-store.conf
"""


class Apache(Proxy):
    """conf/apache-plant-store.conf.example in front of the service at ``upstream_port``, in
    the foreground, never as root: under root it runs as www-data (or nobody), in a
    directory under /tmp it owns (``tmp`` may be one only root can enter), removed at stop."""

    name = "apache"
    example = CONF / "apache-plant-store.conf.example"

    def __init__(self, tmp, upstream_port):
        user = None
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("www-data")
            except KeyError:
                user = pwd.getpwnam("nobody")
            self.dir = pathlib.Path(tempfile.mkdtemp(prefix="plant-store-apache-", dir="/tmp"))
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._made = self.dir
        else:
            self.dir, self._made = pathlib.Path(tmp), None
        self.port, self.http_port = free_port(), free_port()
        cert, key, _ = certificates().install(self.dir, user)
        site = self.example.read_text()
        site = _replace(site, "<VirtualHost *:80>", f"<VirtualHost 127.0.0.1:{self.http_port}>")
        site = _replace(site, "<VirtualHost *:443>", f"<VirtualHost 127.0.0.1:{self.port}>")
        site = _replace(site, "/etc/letsencrypt/live/plants.example.com/fullchain.pem", str(cert))
        site = _replace(site, "/etc/letsencrypt/live/plants.example.com/privkey.pem", str(key))
        site = _replace(site, "http://127.0.0.1:8080/", f"http://127.0.0.1:{upstream_port}/", 2)
        (self.dir / "plant-store.conf").write_text(site)
        (self.dir / "apache.conf").write_text(APACHE_MAIN.format(
            tmp=self.dir, port=self.port, http_port=self.http_port, modules=APACHE_MODULES))
        # -X would be one process, but its children's behaviour is what runs in production.
        self._start([APACHE, "-f", str(self.dir / "apache.conf"), "-DFOREGROUND"],
                    env={"LANG": "C"}, user=user)

    def stop(self):
        try:
            super().stop()
        finally:
            if self._made:
                shutil.rmtree(self._made, ignore_errors=True)
                self._made = None


class Caddy(Proxy):
    """conf/Caddyfile.example in front of the service at ``upstream_ports``, its admin API
    on a free port, its storage (autosave, certificates) in ``tmp``."""

    name = "caddy"
    example = CONF / "Caddyfile.example"

    def __init__(self, tmp, *upstream_ports):
        self.dir = pathlib.Path(tmp)
        self.port, self.http_port = free_port(), free_port()
        cert, key, _ = certificates().install(self.dir)
        site = self.example.read_text()
        site = _replace(site, "admin localhost:2019", f"admin 127.0.0.1:{free_port()}\n"
                        f"\thttp_port {self.http_port}\n\thttps_port {self.port}")
        # The example's automatic certificate for its name becomes the test's own.
        site = _replace(site, "plants.example.com {", f"127.0.0.1 {{\n\ttls {cert} {key}")
        site = _replace(site, "reverse_proxy 127.0.0.1:8080 {", "reverse_proxy " + " ".join(
            f"127.0.0.1:{port}" for port in upstream_ports) + " {")
        (self.dir / "Caddyfile").write_text(site)
        home = str(self.dir)
        self._start([CADDY, "run", "--config", str(self.dir / "Caddyfile"),
                     "--adapter", "caddyfile"],
                    env={"HOME": home, "XDG_CONFIG_HOME": home, "XDG_DATA_HOME": home})


class CaddyStripPrefix(Caddy):
    """conf/Caddyfile-strip-prefix.example: Caddy strips /api, and says so in
    X-Forwarded-Prefix."""

    name = "caddy-strip-prefix"
    example = CONF / "Caddyfile-strip-prefix.example"


class HAProxy(Proxy):
    """conf/haproxy.cfg.example in front of the service at ``upstream_ports`` (one
    ``server`` line each)."""

    name = "haproxy"
    example = CONF / "haproxy.cfg.example"

    def __init__(self, tmp, *upstream_ports):
        self.dir = pathlib.Path(tmp)
        self.port, self.http_port = free_port(), free_port()
        _, _, pem = certificates().install(self.dir)
        config = self.example.read_text()
        config = _replace(config, "bind :80\n", f"bind 127.0.0.1:{self.http_port}\n")
        config = _replace(config, "bind :443 ssl crt /etc/haproxy/certs/plants.example.com.pem",
                          f"bind 127.0.0.1:{self.port} ssl crt {pem}")
        config = _replace(config, "    server a 127.0.0.1:8080\n", "".join(
            f"    server s{n} 127.0.0.1:{port}\n" for n, port in enumerate(upstream_ports)))
        (self.dir / "haproxy.cfg").write_text(config)
        # SIGUSR1 would wait for every connection to end; SIGTERM stops at once.
        self._start([HAPROXY, "-db", "-f", str(self.dir / "haproxy.cfg")])


def missing(proxy_class):
    """Why ``proxy_class`` cannot run here, or None."""
    binary = {Nginx: NGINX, Apache: APACHE, Caddy: CADDY, CaddyStripPrefix: CADDY,
              HAProxy: HAPROXY}[proxy_class]
    if binary is None:
        return f"{proxy_class.name} is not installed (.ci/run installs Debian's)"
    if OPENSSL is None:
        return "openssl is not installed (.ci/run installs Debian's): the proxies speak TLS"
    if proxy_class is Apache and not os.path.isdir(APACHE_MODULES):
        return f"Apache's modules are not in {APACHE_MODULES}"
    return None

