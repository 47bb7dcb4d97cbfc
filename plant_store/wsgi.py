"""``application`` for any WSGI server (gunicorn, uWSGI, mod_wsgi, waitress-serve).

Settings come from ``PLANT_STORE_CONFIG`` (an INI file) and ``PLANT_STORE_<SETTING>``
variables, as for ``plant-store serve``. Issue tokens with ``plant-store token add``.
"""

import atexit
import os

from plant_store import webhooks
from plant_store.app import create_app
from plant_store.config import load
from plant_store.stores import open_store

_config = load(os.environ.get("PLANT_STORE_CONFIG"), os.environ)
_store = open_store(_config)
_worker = webhooks.start(_config, _store)
if _worker is not None:
    atexit.register(_worker.stop)
application = create_app(_config, store=_store, webhooks=_worker)
