"""``plant-store serve`` on granian (``server = granian``): every use of granian, in one
place.

Granian is started through its public embedding API, ``granian.Granian`` (its
``MPServer`` on a GIL build of Python) with ``serve(target_loader=...)``: its master
process binds nothing of the service's, and each worker process it forks builds the
service (:func:`_load`: store, metrics, webhook worker, app, and its probe port) after the
fork, as under gunicorn and uWSGI, and closes it when its server has stopped (a
``multiprocessing`` finalizer, run as the worker process ends). Read in granian 2.8.9
(setup.cfg allows 2.8.x); beyond its documented constructor arguments this relies on one
undocumented name, pinned by tests/unit/serving/test_granian_adapter.py:

- ``signal_handler_reload``: the master's SIGHUP handler, which granian uses to respawn
  its workers. Here SIGHUP stops the server, as under waitress (a closed terminal or a
  supervisor's HUP must not leave a worker waiting for the store's lock behind the old
  one); ignored at start (``nohup``), it stays without effect.

How each setting is honoured is :func:`refusal`'s docstring; what granian answers by
itself, outside the Error shape, is listed in docs/errors.rst.

Several workers count their metrics in one multiprocess directory, as gunicorn's do with
:mod:`plant_store.gunicorn_hooks` (:class:`_MetricsDirectory`): a scrape on any worker sums
every worker's counts.
"""

import contextlib
import logging
import math
import multiprocessing
import multiprocessing.connection
import multiprocessing.util
import os
import pathlib
import resource
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from plant_store import __version__, logs, metrics_archive, prometheus_adapter
from plant_store.config import Config, ConfigError
from plant_store.http import access_log, errors
from plant_store.service import Service
from plant_store.serving import probe_port
from plant_store.serving.busy_threads import BusyThreads
from plant_store.stores import DataDirError, StoreError, one_process_problem
from plant_store.tokens import TokenError, TokenFile, TokenFileError

log = logging.getLogger("plant_store.server")  # the name users filter on

ENV = "PROMETHEUS_MULTIPROC_DIR"  # the client's multiprocess directory

HEADER_DEADLINE_MAX = 60  # seconds: hyper's header_read_timeout, as granian takes it
STARTUP = 0.05  # seconds between looks for the workers' listening socket
WAITRESS_ONLY = {
    "connection_limit": "granian has no limit on connections that lets idle ones go: its "
                        "backpressure counts idle connections too, so at a limit they would "
                        "shut every client out (it takes as many connections as the "
                        "process may open descriptors)",
    "channel_timeout": "granian closes no connection for being idle (hyper's deadline, "
                       "request_timeout, starts at a request's first byte)",
    "min_send_rate": "granian writes answers itself, and says nothing of how fast a client "
                     "reads them",
    "send_rate_window": "granian writes answers itself, and says nothing of how fast a "
                        "client reads them",
}


def refusal(config: Config) -> tuple[str, str] | None:
    """(setting, why) when ``config`` cannot mean under granian what it means under
    waitress; None when it can. How the settings are honoured:

    - host, port: granian's listening address (one address: a host name that resolves to
      several is refused); threads: its blocking threads, per worker; workers: its worker
      processes;
    - request_timeout: hyper's header deadline (a request's headers must arrive whole
      within it, from their first byte; at most 60 s); a body is read by the app, with no
      deadline of granian's;
    - max_body_size, url_prefix, trusted_proxy*, rate_limit, metrics, the access log, CORS:
      the app's own, as under any WSGI server;
    - probe_port: a waitress server of the probes' own in each worker (SO_REUSEPORT);
    - connection_limit, channel_timeout, min_send_rate and send_rate_window: refused when
      given (:data:`WAITRESS_ONLY`);
    - workers above 1: refused on the memory and JSON-file stores (one process serves a
      data directory); on PostgreSQL, with metrics counted, the workers count in one
      multiprocess directory (:class:`_MetricsDirectory`) and a scrape sums them."""
    for name, why in WAITRESS_ONLY.items():
        if name in config.given:
            return name, f"waitress only: {why}"
    if config.request_timeout > HEADER_DEADLINE_MAX:
        return "request_timeout", (f"granian's header deadline is at most "
                                   f"{HEADER_DEADLINE_MAX} s")
    problem = one_process_problem(config.store, config.workers, "granian", "workers = 1")
    if problem:
        return "workers", problem
    addresses = {str(info[4][0]) for info in socket.getaddrinfo(
        config.host, config.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)}
    if len(addresses) > 1:
        return "host", (f"granian listens on one address, and this names {len(addresses)} "
                        f"({' '.join(sorted(addresses))}): give one of them")
    return None


@dataclass
class _Plan:
    """What a worker needs to build its service (picklable, for granian's 'spawn'
    workers): the settings, and where to tell the master why it could not start."""

    config: Config
    address: str  # the one address host resolves to
    failures: multiprocessing.connection.Connection
    metrics_dir: str | None  # where every worker counts, when several share the counts


def _load(plan: _Plan) -> Callable[..., Iterable[bytes]]:
    """In each worker, after the fork: the service and its probe port, closed by
    :func:`_close` once the worker's server has stopped. A failure to start (the data
    directory locked, a database unreachable) is sent to the master, which says it in one
    line, and the worker ends."""
    config = plan.config
    if plan.metrics_dir is not None:  # a forked worker: the master imported the client
        prometheus_adapter.count_in_files()
    try:
        service = _open(config, plan.metrics_dir)
        busy = BusyThreads(service.app, config.threads)
        try:
            probes = _probes(service, config, plan.address, busy.unready)
        except BaseException:
            service.close()
            raise
    except (ConfigError, StoreError, TokenError) as exc:
        with contextlib.suppress(OSError):
            plan.failures.send(str(exc))
        os._exit(2)  # nothing is open; the master reports it
    # Run by multiprocessing as the worker process ends, after granian's server returns
    # (every answer in flight sent): not atexit's, which a forked process skips.
    multiprocessing.util.Finalize(None, _close, args=(service, probes), exitpriority=10)
    return _refuse_too_large(busy, config.max_body_size)


def _refuse_too_large(app: Callable[..., Iterable[bytes]], limit: int
                      ) -> Callable[..., Iterable[bytes]]:
    """413 at once for a Content-Length over ``limit``, token or not, before the app (as
    waitress refuses it: errors.rst), its body unread and the connection closed."""
    body = errors.document(413, errors.TOO_LARGE.format(limit))
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
               ("Connection", "close")]

    def refusing(environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        length = environ.get("CONTENT_LENGTH") or ""
        if length.isdigit() and int(length) > limit:
            start_response("413 Content Too Large", headers)
            return [body]
        return app(environ, start_response)

    return refusing


def _open(config: Config, metrics_dir: str | None) -> Service:
    try:
        return Service(config, tokens=TokenFile(config.token_file), metrics_dir=metrics_dir)
    except DataDirError as exc:
        raise config.blame("data_dir", str(exc)) from None
    except TokenFileError as exc:
        raise config.blame("token_file", str(exc)) from None


def _probes(service: Service, config: Config, address: str,
            unready: Callable[[], str | None]) -> Any:
    if not config.probe_port:
        return None
    try:  # every worker binds it, and the kernel spreads the probes among them
        listener = probe_port.listen(address, config.probe_port, reuse_port=True)
    except OSError as exc:
        raise config.blame("probe_port", f"cannot listen on {config.host}:"
                                         f"{config.probe_port}: {exc.strerror}") from None
    return probe_port.serve(service.app, listener, unready)  # busy threads: not ready


def _close(service: Service, probes: Any) -> None:
    if probes is not None:
        probes.stop()
    service.close()  # after the last request: their deliveries are in the outbox
    access_log.flush_all()  # the last requests' lines
    logs.drain()  # to stderr, within its timeout: a forked worker runs no atexit


class _MetricsDirectory:
    """The multiprocess directory where several workers count (the master's, as
    :mod:`plant_store.gunicorn_hooks` keeps gunicorn's): ``PROMETHEUS_MULTIPROC_DIR`` when
    set, else one made under the system's temporary directory and named in the
    environment, which the workers inherit. None is used by one worker, which counts in
    its own memory (cheaper), unless the variable names one.

    Invariants: the directory is emptied once, in :meth:`open`, before any worker forks (an
    earlier run's files would be added in); while the server runs, a scrape on any worker
    reads every worker's files (:mod:`plant_store.metrics`); granian's workers end only
    with the server (plant-store neither respawns nor recycles them; one that dies stops
    the others), so :meth:`close`, run once every worker has ended, merges each one's files
    into the archive (:mod:`plant_store.metrics_archive`) and removes the directory if it
    was made here, leaving the environment as it found it."""

    def __init__(self, config: Config) -> None:
        self._given = os.environ.get(ENV) or None
        self._used = config.metrics != "off" and (config.workers > 1 or bool(self._given))
        self.path: str | None = None  # once open
        self._made = False

    def open(self) -> str | None:
        """The directory, emptied and named to the workers (None: each counts alone), or
        StoreError saying why it cannot serve."""
        if not self._used:
            return None
        if self._given:
            self.path = self._given
        else:
            self.path, self._made = tempfile.mkdtemp(prefix="plant-store-metrics-"), True
        try:
            metrics_archive.prepare(self.path)
        except metrics_archive.DirectoryError as exc:
            raise StoreError(f"{ENV}={self.path}: {exc}") from None
        os.environ[ENV] = self.path
        return self.path

    def close(self) -> None:
        """Once every worker has ended: their counts into the archive, or the directory
        gone if made here."""
        if self.path is None:
            return
        if self._made:
            shutil.rmtree(self.path, ignore_errors=True)
            os.environ.pop(ENV, None)
            self.path = None
            return
        for pid in sorted(metrics_archive.workers(self.path)):
            try:
                metrics_archive.merge_ended(self.path, pid)
            except Exception:  # the counts stay in the worker's files, still summed
                log.exception("metrics of ended worker %d left unmerged", pid)


def _tls(config: Config) -> dict[str, Any]:
    """granian's TLS arguments for ``tls_certificate`` and ``tls_key`` (none without),
    the files checked at start as :mod:`plant_store.serving.tls_files` says: a refusal in
    one line, a warning logged."""
    if not config.tls_certificate:
        return {}
    from plant_store.serving import tls_files

    try:
        checked = tls_files.check(config.tls_certificate, config.tls_key)
    except tls_files.TlsFileError as exc:
        raise config.blame(exc.setting, str(exc)) from None
    for warning in checked.warnings:
        log.warning("%s", warning)
    return {"ssl_cert": pathlib.Path(config.tls_certificate),
            "ssl_key": pathlib.Path(config.tls_key)}


def _server_class() -> type:
    import granian

    class Server(granian.Granian):  # type: ignore[misc,valid-type]  # MPServer on a GIL build
        """granian's server, with SIGHUP a stop signal (see the module's docstring)."""

        hup_ignored = False

        def signal_handler_reload(self, *args: Any, **kwargs: Any) -> None:
            if not self.hup_ignored:
                self.signal_handler_interrupt()

    return Server


def _reserve(address: str, port: int) -> socket.socket:
    """A socket bound (not listening) to ``address``:``port`` with SO_REUSEPORT, as
    granian's workers bind: port 0 is resolved here, and the port is kept from any other
    use (a client's outgoing connection) until the workers listen on it."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((address, port))
    except BaseException:
        sock.close()
        raise
    return sock


def _listening(address: str, port: int) -> bool:
    """Whether a worker takes connections there (one is made and closed at once)."""
    target = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(address, address)
    try:
        with socket.create_connection((target, port), timeout=1):
            return True
    except OSError:
        return False


def descriptor_limit() -> int:
    """The most descriptors this process may open: what bounds granian's connections."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def _run(plan: _Plan, reserved: socket.socket, on_ready: Callable[[str], None] | None,
         grace: float) -> int | str | None:
    """Granian's master, until its workers have ended: its exit status (0, or a worker's
    unasked end)."""
    from granian.constants import Interfaces
    from granian.http import HTTP1Settings
    from granian.log import LogLevels

    config, address, port = plan.config, plan.address, reserved.getsockname()[1]
    hup_ignored = signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    server = _server_class()(
        plan, address=address, port=port,
        interface=Interfaces.WSGI, workers=config.workers, websockets=False,
        blocking_threads=config.threads,
        # Connections, not requests: an idle one holds a permit too, so the limit is the
        # descriptors' (threads bound the requests the app runs at once).
        backpressure=descriptor_limit(),
        http1_settings=HTTP1Settings(header_read_timeout=config.request_timeout * 1000),
        # Its lines reach the service's handler (logs.configure), in its format.
        log_level=LogLevels(config.log_level), log_access=False,
        log_dictconfig={"formatters": {}, "handlers": {}, "loggers": {
            "_granian": {"handlers": [], "propagate": True},
            "granian.access": {"handlers": [], "propagate": True}}},
        workers_kill_timeout=math.ceil(grace + config.webhook_timeout) + 1,
        # HTTPS served directly: read at each start, so a renewed certificate is served
        # from the next one (files checked readable first: granian's own error is a trace).
        **_tls(config),
    )
    server.hup_ignored = hup_ignored
    prefix = config.url_prefix
    scheme = "https" if config.tls_certificate else "http"
    url = f"{scheme}://{f'[{address}]' if ':' in address else address}:{port}{prefix}"
    stopped = threading.Event()

    def announce() -> None:
        while not stopped.is_set():
            if _listening(address, port):
                reserved.close()
                if on_ready:
                    on_ready(url)
                log.info("plant-store listening on %s (version %s, server: granian, store: "
                         "%s, data directory %s, %d workers of %d threads)", url, __version__,
                         config.store,
                         os.path.abspath(config.data_dir), config.workers, config.threads)
                return
            time.sleep(STARTUP)

    watcher = threading.Thread(target=announce, name="plant-store-announce", daemon=True)
    watcher.start()
    status: int | str | None = 0
    try:
        server.serve(target_loader=_load)
    except SystemExit as exc:  # a worker ended unasked, granian stopped the others
        status = exc.code
    finally:
        stopped.set()
        watcher.join(5)
    return status


def serve(config: Config, on_ready: Callable[[str], None] | None, grace: float) -> None:
    """Serve on granian until SIGTERM, SIGINT or SIGHUP; ``on_ready(url)`` once a worker
    listens; then each worker finishes what is in flight (killed after ``grace`` seconds
    and the webhook deliveries' time to end) and closes its service."""
    try:
        import granian  # noqa: F401  # only whether it is installed, here
    except ModuleNotFoundError:
        raise config.blame("server", "granian is not installed: pip install "
                                     "'plant-store[granian]'") from None
    why = refusal(config)
    if why is not None:
        raise config.blame(*why)
    address = str(socket.getaddrinfo(config.host, config.port, type=socket.SOCK_STREAM,
                                     flags=socket.AI_PASSIVE)[0][4][0])
    try:
        reserved = _reserve(address, config.port)
    except OSError as exc:
        raise config.blame("port", f"cannot listen on {config.host}:{config.port}: "
                                   f"{exc.strerror}") from None
    failures, told = multiprocessing.Pipe(duplex=False)
    metrics_dir = _MetricsDirectory(config)
    try:
        plan = _Plan(config, address, told, metrics_dir.open())
        status = _run(plan, reserved, on_ready, grace)
    finally:
        reserved.close()
        metrics_dir.close()  # every worker has ended
    if failures.poll():
        raise StoreError(failures.recv())
    if status:
        raise SystemExit("plant-store: error: a granian worker process ended unexpectedly; "
                         "see the log above")
