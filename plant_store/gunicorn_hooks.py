"""gunicorn settings for the metrics of several workers:
``gunicorn -c python:plant_store.gunicorn_hooks -w 4 plant_store.wsgi:application``.

Each worker keeps its counts in files of its own in ``PROMETHEUS_MULTIPROC_DIR``, and a
scrape, whichever worker serves it, sums them (:mod:`plant_store.metrics`). The directory
must be empty when the server starts (files of an earlier run would be added in, and a PID
used again would carry on an old count) and must outlive the workers (a worker that ends,
recycled by ``max_requests`` or killed, keeps its counts in the total, so counters never go
back). So, once per start of the server, in gunicorn's master:

- when ``PROMETHEUS_MULTIPROC_DIR`` is set, that directory is made if missing, and emptied
  of its ``*.db`` files;
- when it is not, one is made under the system's temporary directory, named in the
  environment here (gunicorn reads this module before it imports the app, ``--preload`` or
  not, and the client chooses its mode when first imported), and removed when gunicorn
  exits.

The workers keep no gauges in those files (the outbox's are read from the store at each
scrape), so nothing has to be marked dead when a worker ends. Other pre-fork servers
(uWSGI): set ``PROMETHEUS_MULTIPROC_DIR`` to a directory made empty at each start, e.g.
systemd's ``RuntimeDirectory=``.
"""

import glob
import os
import shutil
import tempfile

ENV = "PROMETHEUS_MULTIPROC_DIR"

if not os.environ.get(ENV):
    os.environ[ENV] = _made = tempfile.mkdtemp(prefix="plant-store-metrics-")
else:
    _made = None


# gunicorn's threaded worker, with /health and /ready on threads of their own
# (plant_store.gunicorn_probes); ``-k`` on the command line overrides it.
worker_class = "plant_store.gunicorn_probes.ProbeLaneWorker"

# Each worker's files grow a page at a time through mmap: on a full file system the write
# faults and the kernel kills the worker (SIGBUS), mid-request, after its commit.
MIN_FREE = 64 << 20  # bytes free in the directory at start


def on_starting(server: object) -> None:
    """Refuse to start, in one line, with a directory the workers could not write."""
    directory = os.environ[ENV]
    try:
        os.makedirs(directory, exist_ok=True)
        for path in glob.glob(os.path.join(directory, "*.db")):
            os.unlink(path)
        tempfile.TemporaryFile(dir=directory).close()
        stats = os.statvfs(directory)
    except OSError as exc:
        raise SystemExit(f"plant-store: error: {ENV}={directory}: {exc.strerror}") from None
    free = stats.f_bavail * stats.f_frsize
    if free < MIN_FREE:
        raise SystemExit(f"plant-store: error: {ENV}={directory}: {free >> 20} MiB free; the "
                         f"workers' metrics need at least {MIN_FREE >> 20} MiB")


def on_exit(server: object) -> None:
    if _made and os.environ.get(ENV) == _made:
        shutil.rmtree(_made, ignore_errors=True)
