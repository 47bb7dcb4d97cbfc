"""A thing said once per server start, across the worker processes of a pre-fork server.

A gunicorn worker recycled by ``--max-requests`` opens the service anew, and would say at
each start what it said at the first (62 identical warnings in 15 s). The master names a
folder of markers in the environment before it forks (:data:`ENV`, set by
``plant_store.gunicorn_hooks``); the first process to make a marker there says it, the
others keep quiet (``O_EXCL``: one maker, however many start at once). Without the folder
(``plant-store serve``: one process a start) everything is said.
"""

import os

ENV = "PLANT_STORE_ONCE_DIR"


def first(name: str) -> bool:
    """Whether this process is the first of this server start to say ``name``."""
    folder = os.environ.get(ENV)
    if not folder:
        return True
    try:
        os.close(os.open(os.path.join(folder, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                         0o600))
    except FileExistsError:
        return False
    except OSError:
        return True  # a folder gone or unwritable: say it rather than never
    return True
