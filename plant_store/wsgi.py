"""``application`` for any WSGI server (gunicorn, uWSGI, mod_wsgi, waitress-serve).

Settings come from ``PLANT_STORE_CONFIG`` (an INI file) and ``PLANT_STORE_<SETTING>``
variables, as for ``plant-store serve``; they are read here, so a bad one fails at import.
Nothing is opened at import: each serving process opens the store at its first request
(see :mod:`plant_store.serving.lazy_app`). Issue tokens with ``plant-store token add``. Logging is
configured here as ``log_level`` and ``log_format`` say, unless the server or a host already
configured it (see :mod:`plant_store.logs`). What uWSGI, gunicorn and granian do that the app
must not see is undone around it here (:mod:`plant_store.serving.server_quirks`).
With several worker processes, ``PROMETHEUS_MULTIPROC_DIR`` names the directory where each
keeps its metrics, so that a scrape sums them: under the gunicorn hooks, a subdirectory the
master made for this start (see :mod:`plant_store.gunicorn_hooks`); under uWSGI, one made
empty at each start.
"""

import os

from plant_store import logs
from plant_store.config import load
from plant_store.serving import probes, server_quirks
from plant_store.serving.lazy_app import LazyApp, warn_under_uwsgi

_config = load(os.environ.get("PLANT_STORE_CONFIG"), os.environ)
# Logging goes through a queue (a thread of its own) unless this process is one uWSGI
# forks its workers from.
logs.configure_unless_configured(_config.log_level, _config.log_format,
                                 queued=server_quirks.may_start_threads())
contended = warn_under_uwsgi(_config)  # several processes on a store that serves one
server_quirks.at_fork_under_uwsgi()  # before the probe port's: a worker catches up first
application = server_quirks.ServerQuirks(LazyApp(
    _config, metrics_dir=os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None,
    wait_for_owner=not contended))
if _config.probe_port:  # uWSGI's probes: a port of their own in each worker
    probes.in_uwsgi_workers(application, _config.host, _config.probe_port)
