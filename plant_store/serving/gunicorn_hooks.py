"""gunicorn settings for the service's logs, its probes and the metrics of several workers:
``gunicorn -c python:plant_store.gunicorn_hooks -w 4 plant_store.wsgi:application``.

Only gunicorn's public settings and server hooks are used, on gunicorn 27.0 and newer: its
``gthread`` worker answers the connections it accepted before a recycle by
``max_requests`` or a reload ends it, idle keep-alive ones included (23 reset accepted
ones; 26 closed idle keep-alive ones unanswered), and gives a connection a thread only
once its request arrives (before 26, a client that connected and never sent held a
thread for good). Its stock ``gthread`` worker serves the
requests; the probes get a port of their own in each worker (``probe_port``, started in
``post_worker_init``), served by threads nothing else uses, as under uWSGI
(:mod:`plant_store.serving.probes`).

gunicorn's own lines (``gunicorn.error``) take the service's ``log_format``, so that every
line of the server is in one format.

Each worker keeps its counts in files of its own in ``PROMETHEUS_MULTIPROC_DIR``, and a
scrape, whichever worker serves it, sums them (:mod:`plant_store.metrics`). Those files
must be this start's only (files of an earlier run would be added in, and a PID used again
would carry on an old count) and must outlive the workers (a worker that ends, recycled by
``max_requests`` or killed, keeps its counts in the total, so counters never go back). So
the master counts in a subdirectory of its own, made for this start inside the directory
``PROMETHEUS_MULTIPROC_DIR`` names, or inside the system's temporary directory when it is
unset (:class:`plant_store.serving.metrics_directory.OwnDirectory`): named in the
environment when gunicorn reads this module (before it imports the app, ``--preload`` or
not, and before the client, which chooses its mode when first imported, is imported),
made in ``on_starting``, before any worker forks, and removed when gunicorn exits. Nothing
else in the named directory is touched: other programs' files, and other services'
subdirectories, stay.

When a worker ends (recycled by ``max_requests``, killed, or at a reload), the master
marks it dead for the client and merges its files into the ended workers' archive
(:mod:`plant_store.metrics.archive`), in the same subdirectory, so it stays a few files
plus two per worker. Other pre-fork servers (uWSGI): set ``PROMETHEUS_MULTIPROC_DIR`` to a
directory made empty at each start, e.g. systemd's ``RuntimeDirectory=``; it then keeps
two files per worker that ever ran.
"""

import os
import shutil
import socket
import tempfile
import threading

from plant_store.serving import metrics_directory

ENV = metrics_directory.ENV

# Before anything imports prometheus_client, which chooses its multiprocess mode when first
# imported (after it, the workers would count in memory of their own, and a scrape would
# sum an empty directory), and before gunicorn imports the app (--preload), which reads it.
_configured = os.environ.get(ENV) or None  # the user's, for messages
_metrics = metrics_directory.OwnDirectory(_configured)  # made in on_starting
os.environ[ENV] = _metrics.path
_once: str | None = None  # the folder of once-said markers this module made

import gunicorn  # noqa: E402
from gunicorn import glogging  # noqa: E402
from gunicorn.arbiter import Arbiter  # noqa: E402
from gunicorn.config import Config  # noqa: E402
from gunicorn.workers.base import Worker  # noqa: E402
from prometheus_client import multiprocess  # noqa: E402

from plant_store import config as _config  # noqa: E402  # 'config' is a gunicorn setting
from plant_store import logs  # noqa: E402
from plant_store.metrics import archive as metrics_archive  # noqa: E402
from plant_store.serving import probes, waitress_loop  # noqa: E402
from plant_store.stores import one_process_problem  # noqa: E402
from plant_store.util.files import ONCE_ENV  # noqa: E402

# Forwarded headers are the app's to judge (trusted_proxy, plant_store.util.forwarded):
# gunicorn's own defaults take X-Forwarded-Proto from any loopback or Unix-socket peer as the scheme
# (secure_scheme_headers, forwarded_allow_ips), whatever the service's settings say.
secure_scheme_headers: dict[str, str] = {}
forwarded_allow_ips = ""

# gunicorn's own threaded worker: since 24.0, a worker recycled by max_requests or stopped
# answers the connections it accepted before it ends. ``-k`` overrides it.
worker_class = "gthread"

# gunicorn 25.1+ opens a control socket under $XDG_RUNTIME_DIR or $HOME by default; the
# shipped systemd unit (ProtectHome=yes, ProtectSystem=strict) allows neither, and the
# service needs none (gunicorn before 25.1 ignores the name).
control_socket_disable = True

OLDEST = (27, 0)  # the oldest gunicorn these hooks are tested with


class _Logger(glogging.Logger):
    """gunicorn's logger, its lines in the service's ``log_format`` (gunicorn makes its
    handlers anew at start and at each reload, in ``setup``)."""

    def setup(self, cfg: Config) -> None:
        super().setup(cfg)
        try:
            log_format = _config.load(os.environ.get("PLANT_STORE_CONFIG"), os.environ,
                                      only={"log_format"}).log_format
        except _config.ConfigError:
            return  # gunicorn's format; plant_store.wsgi's import says what is wrong
        for handler in self.error_log.handlers:
            handler.setFormatter(logs.formatter(log_format))


logger_class = f"{__name__}._Logger"


def on_starting(server: Arbiter) -> None:
    """Refuse to start, in one line, on a gunicorn older than OLDEST, with a store that
    serves one process and more than one worker, or a directory the workers could not
    write."""
    if gunicorn.version_info < OLDEST:
        raise SystemExit(f"plant-store: error: plant_store.gunicorn_hooks needs gunicorn "
                         f"{'.'.join(map(str, OLDEST))} or newer (this is "
                         f"{gunicorn.__version__}); pip install 'gunicorn>=27'")
    _refuse_workers_that_cannot_share(server.cfg.workers)
    _listen_for_probes(server)
    global _once
    try:
        _metrics.open()
    except metrics_directory.DirectoryError as exc:
        raise SystemExit(f"plant-store: error: {ENV}={_configured or _metrics.parent}: "
                         f"{exc}") from None
    # What a worker says at its start is said by the first worker of this start only.
    os.environ[ONCE_ENV] = _once = tempfile.mkdtemp(prefix="plant-store-once-")


def nworkers_changed(server: Arbiter, new_value: int, old_value: int | None) -> None:
    """A worker added later (``kill -TTIN``) on a store that serves one process is refused
    too, in one line: it would answer 503 to every request it took."""
    if old_value is None or new_value <= old_value or new_value <= 1:
        return
    try:
        _refuse_workers_that_cannot_share(new_value)
    except SystemExit as refusal:
        server.log.error("%s: the worker count stays %d", refusal, old_value)  # type: ignore[union-attr]
        server.num_workers = old_value  # calls this again, going down: nothing to do


def _refuse_workers_that_cannot_share(workers: int) -> None:
    """The store as plant_store.wsgi will read it (that setting only: the app's import
    reports the others)."""
    try:
        store = _config.load(os.environ.get("PLANT_STORE_CONFIG"), os.environ,
                            only={"store"}).store
    except _config.ConfigError as exc:
        raise SystemExit(f"plant-store: error: {exc}") from None
    problem = one_process_problem(store, workers, "gunicorn", "-w 1")
    if problem:
        raise SystemExit(f"plant-store: error: {problem}")


_probes: socket.socket | None = None  # the probe port, bound by the master
_serving: "waitress_loop.Background | None" = None  # this worker's server on it


def _listen_for_probes(server: Arbiter) -> None:
    """Bind ``probe_port`` once, in the master, for every worker to accept from (a worker
    that ends leaves no queue of its own behind), on the host of gunicorn's first ``-b``
    (where its clients, and so its orchestrator, reach it), or say that the probes wait
    with the requests."""
    global _probes
    try:
        port = _config.load(os.environ.get("PLANT_STORE_CONFIG"), os.environ,
                            only={"probe_port"}).probe_port
    except _config.ConfigError as exc:
        raise SystemExit(f"plant-store: error: {exc}") from None
    if not port:
        server.log.warning(  # type: ignore[union-attr]
            "probe_port is 0: /health and /ready wait behind the requests for gunicorn's "
            "threads; set PLANT_STORE_PROBE_PORT to give them a port of their own")
        return
    bound = [address for address in server.cfg.address if isinstance(address, tuple)]
    if any(int(bound_port) == port for _, bound_port in bound):
        raise SystemExit(f"plant-store: error: probe_port={port} is a port gunicorn binds "
                         f"(-b); give the probes a port of their own")
    host = str(bound[0][0]) if bound else "127.0.0.1"
    try:
        _probes = probes.listen(host, port)
    except OSError as exc:
        raise SystemExit(f"plant-store: error: probe_port={port} on {host}: "
                         f"{exc.strerror}") from None


def post_worker_init(worker: Worker) -> None:
    """Answer ``/health`` and ``/ready`` on the probe port in this worker, from threads of
    their own: gunicorn's request threads may all wait (a locked table, a database that
    has gone) while a probe must answer within a second."""
    global _serving
    if _probes is not None:
        _serving = probes.serve(worker.wsgi, _probes)


def worker_exit(server: Arbiter, worker: Worker) -> None:
    """A worker that ends (recycled, reloaded, stopped) answers the probes it accepted."""
    if _serving is not None:
        _serving.stop()


def on_exit(server: object) -> None:
    """Remove what this start made: its metrics subdirectory (the files the service made
    there, and it if that empties it) and its folder of once-said markers."""
    _metrics.close()
    if _once:
        shutil.rmtree(_once, ignore_errors=True)


_ended: set[int] = set()  # PIDs of ended workers whose files are still to merge
_merging = threading.Lock()


def child_exit(server: Arbiter, worker: Worker) -> None:
    """Fold an ended worker's counts into the archive, and those of any whose merge was
    put off. gunicorn calls this in the master's SIGCHLD handler, which another worker's
    end may interrupt: the inner call then only adds its PID, for the next call. A PID put
    off and since given to a new worker waits for that one's end."""
    directory = os.environ[ENV]
    # The master sets pid to the child's after the fork; typeshed has the "[booting]" str.
    ended: int = worker.pid  # type: ignore[assignment]
    multiprocess.mark_process_dead(ended, directory)
    _ended.add(ended)
    if not _merging.acquire(blocking=False):
        return
    try:
        for pid in sorted(_ended - set(server.WORKERS)):
            try:
                if metrics_archive.merge_ended(directory, pid):
                    _ended.discard(pid)
            except Exception:  # raised here, it would end the master
                _ended.discard(pid)
                # The arbiter has its log from setup(), before any worker ends.
                server.log.exception(  # type: ignore[union-attr]
                    "metrics of ended worker %d left unmerged", pid)
    finally:
        _merging.release()
