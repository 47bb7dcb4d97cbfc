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
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from plant_store import __version__, logs
from plant_store.config import Config, ConfigError
from plant_store.http import access_log, errors
from plant_store.metrics import prometheus_adapter
from plant_store.service import Service
from plant_store.serving import probes, server_quirks
from plant_store.serving.connection_upkeep import ConnectionUpkeep
from plant_store.serving.metrics_directory import MetricsDirectory as _MetricsDirectory
from plant_store.serving.probes import BusyThreads
from plant_store.stores import DataDirError, StoreError, one_process_problem
from plant_store.tokens import TokenError, TokenFile, TokenFileError

log = logging.getLogger("plant_store.server")  # the name users filter on

ENV = "PROMETHEUS_MULTIPROC_DIR"  # the client's multiprocess directory

# Descriptors a worker needs beside its connections: its store, pool, log, probe port,
# pipes, and the connection upkeep's copies (the hostile pass on issue 49: a limit the
# descriptors could not hold left granian's accept loop spinning on EMFILE).
RESERVED_FDS = 64
PR_SET_PDEATHSIG = 1  # prctl's option (linux/prctl.h)
HEADER_DEADLINE_MAX = 60  # seconds: hyper's header_read_timeout, as granian takes it
STARTUP = 0.05  # seconds between looks for the workers' listening socket


def refusal(config: Config) -> tuple[str, str] | None:
    """(setting, why) when ``config`` cannot mean under granian what it means under
    waitress; None when it can. How the settings are honoured:

    - host, port: granian's listening address (one address: a host name that resolves to
      several is refused); threads: its blocking threads, per worker; workers: its worker
      processes;
    - request_timeout: hyper's header deadline (a request's headers must arrive whole
      within it, from their first byte; at most 60 s); and, kept by the worker's
      connection upkeep (:mod:`plant_store.serving.connection_upkeep`), how long a
      connection may send nothing at all, and an answer go untaken;
    - connection_limit: the connections each worker takes (granian's backpressure); at
      the limit, the upkeep lets idle connections go, then the slowest readers; refused
      above what the descriptor limit leaves beside RESERVED_FDS;
      channel_timeout, min_send_rate and send_rate_window: kept by the upkeep as waitress
      keeps them;
    - HTTP/1.1 only, over TLS too: no HTTP/2 (see :func:`_run`);
    - max_body_size, url_prefix, trusted_proxy*, rate_limit, metrics, the access log, CORS:
      the app's own, as under any WSGI server;
    - probe_port: a waitress server of the probes' own in each worker (SO_REUSEPORT);
    - workers above 1: refused on the memory and JSON-file stores (one process serves a
      data directory); on PostgreSQL, with metrics counted, the workers count in one
      multiprocess directory (:class:`_MetricsDirectory`) and a scrape sums them."""
    if config.request_timeout > HEADER_DEADLINE_MAX:
        return "request_timeout", (f"granian's header deadline is at most "
                                   f"{HEADER_DEADLINE_MAX} s")
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and config.connection_limit + RESERVED_FDS > soft:
        return "connection_limit", (
            f"each granian worker takes {config.connection_limit} connections and needs "
            f"{RESERVED_FDS} descriptors beside them, but may open {soft} (ulimit -n): "
            f"at most {max(0, soft - RESERVED_FDS)} here, or raise the limit")
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
    port: int  # the one port, resolved
    failures: multiprocessing.connection.Connection
    metrics_dir: str | None  # where every worker counts, when several share the counts
    restarts: Any  # workers replaced so far: a multiprocessing.Value the master counts in
    master: int  # the master's process id


def _load(plan: _Plan) -> Callable[..., Iterable[bytes]]:
    """In each worker, after the fork: the service and its probe port, closed by
    :func:`_close` once the worker's server has stopped. A failure to start (the data
    directory locked, a database unreachable) is sent to the master, which says it in one
    line, and the worker ends."""
    config = plan.config
    _end_with_the_master(plan.master)
    if plan.metrics_dir is not None:  # a forked worker: the master imported the client
        prometheus_adapter.count_in_files()
    try:
        service = _open(config, plan.metrics_dir)
        busy = BusyThreads(config.threads)
        upkeep = ConnectionUpkeep(
            plan.port, request_timeout=config.request_timeout,
            channel_timeout=config.channel_timeout, limit=config.connection_limit,
            min_rate=config.min_send_rate, window=config.send_rate_window,
            running=busy.running)
        service.metrics.read_at_scrape(_Restarts(plan.restarts))
        try:
            probes = _probes(service, config, plan.address,
                             lambda: busy.unready() or upkeep.unready())
        except BaseException:
            service.close()
            raise
    except (ConfigError, StoreError, TokenError) as exc:
        with contextlib.suppress(OSError):
            plan.failures.send(str(exc))
        os._exit(2)  # nothing is open; the master reports it
    # Run by multiprocessing as the worker process ends, after granian's server returns
    # (every answer in flight sent): not atexit's, which a forked process skips.
    multiprocessing.util.Finalize(None, _close, args=(service, probes, upkeep),
                                  exitpriority=10)
    upkeep.start()
    return _front(service.app, config.max_body_size, service.metrics.refused_by_server, busy)


class _Restarts:
    """``plant_store_worker_restarts``, read at each scrape from the master's count (shared
    memory), so every worker tells the same number."""

    def __init__(self, count: Any) -> None:
        self._count = count

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("plant_store_worker_restarts", "Worker processes granian "
                                "replaced since the server started, each having ended "
                                "unexpectedly (killed, crashed).", self._count.value)


def _end_with_the_master(master: int) -> None:
    """SIGTERM to this worker when the master ends, killed or not (Linux's parent-death
    signal): an orphan went on serving and holding the data directory's lock, so a new
    start was refused (the hostile pass on issue 49). SIGTERM stops a worker as the
    master's stop does: in-flight requests answered, the service closed."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != master:  # it ended before the call: no signal will come
        os.kill(os.getpid(), signal.SIGTERM)


def _front(app: Callable[..., Iterable[bytes]], limit: int,
           counted: Callable[[str, str, int], None] = lambda *request: None,
           busy: BusyThreads | None = None) -> Callable[..., Iterable[bytes]]:
    """What granian's worker serves: ``app`` behind the two refusals granian leaves to it,
    and its calls in flight recorded in ``busy`` (for the probe port's ``/ready``), in one
    step (a wrapper for each cost 1.1 us a request, a fifth of the service's own work): a
    Content-Length over ``limit`` is refused 413 at once, token or not, before the app (as
    waitress refuses it: errors.rst), its body unread and the connection closed, and told
    to ``counted(method, path, 413)`` (the metrics: as waitress's own 413s are, the hostile
    pass on issue 52 found these uncounted); a body without a length is refused 411 when
    read (:class:`~plant_store.serving.server_quirks.LengthRequired`)."""
    body = errors.document(413, errors.TOO_LARGE.format(limit))
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
               ("Connection", "close")]
    unreadable = server_quirks.unreadable_without_length
    busy = busy if busy is not None else BusyThreads(1)
    tokens, started, monotonic = busy.tokens, busy.started, time.monotonic
    digits = len(str(limit))  # a length of fewer digits is below the limit, unread

    def front(environ: dict[str, Any], start_response: Callable[..., Any]
              ) -> Iterable[bytes]:
        length = environ.get("CONTENT_LENGTH")
        if not length:
            unreadable(environ)
        elif (len(length) >= digits and length.isascii() and length.isdigit()
              and int(length) > limit):
            start_response("413 Content Too Large", headers)
            counted(environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", ""), 413)
            return [body]
        token = next(tokens)  # BusyThreads' invariant: one entry per call not returned
        started[token] = monotonic()
        try:
            return app(environ, start_response)  # the app answers with one bytes body
        finally:
            del started[token]

    return front


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
        listener = probes.listen(address, config.probe_port, reuse_port=True)
    except OSError as exc:
        raise config.blame("probe_port", f"cannot listen on {config.host}:"
                                         f"{config.probe_port}: {exc.strerror}") from None
    return probes.serve(service.app, listener, unready)  # busy threads: not ready


def _close(service: Service, probes: Any, upkeep: ConnectionUpkeep) -> None:
    upkeep.stop()
    if probes is not None:
        probes.stop()
    service.close()  # after the last request: their deliveries are in the outbox
    access_log.flush_all()  # the last requests' lines
    logs.drain()  # to stderr, within its timeout: a forked worker runs no atexit


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


class _ThreadsAsMeant(logging.Filter):
    """Drops granian's warning that the blocking threads outnumber the cores: the service
    means them (requests waiting on an fsync or the database share it; the connections
    are bounded by the backpressure it sets), and a default start said it every time."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Configuration allows spawning up to")


def _server_class() -> type:
    import granian

    class Server(granian.Granian):  # type: ignore[misc,valid-type]  # MPServer on a GIL build
        """granian's server, with SIGHUP a stop signal, and a worker that ends unexpectedly
        replaced, unless it ended failing to start (see the module's docstring)."""

        hup_ignored = False
        plan: _Plan
        failed: multiprocessing.connection.Connection  # where a worker says why it failed

        def signal_handler_reload(self, *args: Any, **kwargs: Any) -> None:
            if not self.hup_ignored:
                self.signal_handler_interrupt()

        def _respawn_workers(self, workers: list[int], *args: Any, **kwargs: Any) -> None:
            if self.failed.poll():  # it could not start: another would fail alike
                self.interrupt_signal = True
                self.main_loop_interrupt.set()
                return
            for idx in workers:
                ended = self.wrks[idx].inner
                log.error("granian worker %d (pid %s) ended unexpectedly (exit code %s); "
                          "starting another", idx + 1, ended.pid, ended.exitcode)
            with self.plan.restarts.get_lock():
                self.plan.restarts.value += len(workers)
            super()._respawn_workers(workers, *args, **kwargs)

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


def _run(plan: _Plan, reserved: socket.socket, failed: multiprocessing.connection.Connection,
         on_ready: Callable[[str], None] | None, grace: float) -> int | str | None:
    """Granian's master, until its workers have ended: its exit status (0, or a worker's
    unasked end)."""
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings
    from granian.log import LogLevels

    config, address, port = plan.config, plan.address, plan.port
    hup_ignored = signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    server = _server_class()(
        plan, address=address, port=port,
        interface=Interfaces.WSGI, workers=config.workers, websockets=False,
        blocking_threads=config.threads,
        # HTTP/1.1 only, over TLS too (ALPN offers no h2), and no h2c: an HTTP/2 client
        # can hold every answer of up to 200 streams by opening no window, with nothing
        # of hyper's to time it out (the hostile pass on issue 49); a proxy in front
        # speaks HTTP/2 to clients where wanted.
        http=HTTPModes.http1,
        # Connections, not requests: an idle one holds a permit too; the worker's
        # connection upkeep lets idle and slow ones go at the limit.
        backpressure=config.connection_limit,
        # A worker that ends unexpectedly is replaced (Server._respawn_workers); one that
        # ends again within granian's 5.5 s of its replacement stops the server.
        respawn_failed_workers=True,
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
    server.hup_ignored, server.plan, server.failed = hup_ignored, plan, failed
    logging.getLogger("_granian").addFilter(_ThreadsAsMeant())
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
                         "%s, data directory %s, %s of %d threads)", url, __version__,
                         config.store, os.path.abspath(config.data_dir),
                         "1 worker" if config.workers == 1 else f"{config.workers} workers",
                         config.threads)
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
        plan = _Plan(config, address, reserved.getsockname()[1], told, metrics_dir.open(),
                     multiprocessing.Value("Q", 0), os.getpid())
        status = _run(plan, reserved, failures, on_ready, grace)
    finally:
        reserved.close()
        metrics_dir.close()  # every worker has ended
    if failures.poll():
        raise StoreError(failures.recv())
    if status:
        raise SystemExit("plant-store: error: a granian worker process ended unexpectedly; "
                         "see the log above")
