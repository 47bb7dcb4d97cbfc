"""gunicorn's settings and hooks for Plant Store, by the name users put on the command line:
``gunicorn -c python:plant_store.gunicorn_hooks plant_store.wsgi:application``. They live
in :mod:`plant_store.serving.gunicorn_hooks`, beside the other servers' adapters; gunicorn
reads a config module's names, so each is named here."""

from plant_store.serving.gunicorn_hooks import OLDEST as OLDEST
from plant_store.serving.gunicorn_hooks import child_exit as child_exit
from plant_store.serving.gunicorn_hooks import control_socket_disable as control_socket_disable
from plant_store.serving.gunicorn_hooks import forwarded_allow_ips as forwarded_allow_ips
from plant_store.serving.gunicorn_hooks import logger_class as logger_class
from plant_store.serving.gunicorn_hooks import nworkers_changed as nworkers_changed
from plant_store.serving.gunicorn_hooks import on_exit as on_exit
from plant_store.serving.gunicorn_hooks import on_starting as on_starting
from plant_store.serving.gunicorn_hooks import post_worker_init as post_worker_init
from plant_store.serving.gunicorn_hooks import secure_scheme_headers as secure_scheme_headers
from plant_store.serving.gunicorn_hooks import worker_class as worker_class
from plant_store.serving.gunicorn_hooks import worker_exit as worker_exit
