"""``application`` for any WSGI server (gunicorn, uWSGI, mod_wsgi, waitress-serve).

Settings come from ``PLANT_STORE_CONFIG`` (an INI file) and ``PLANT_STORE_<SETTING>``
variables, as for ``plant-store serve``. Issue tokens with ``plant-store token add``.
"""

import os

from plant_store.app import create_app
from plant_store.config import load

application = create_app(load(os.environ.get("PLANT_STORE_CONFIG"), os.environ))
