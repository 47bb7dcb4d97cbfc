"""Running the app under a server: ``plant-store serve`` on waitress (every private name of
waitress in :mod:`~plant_store.serving.waitress_adapter`, its loop and threads in
:mod:`~plant_store.serving.waitress_loop`) or on granian
(every use of granian in :mod:`~plant_store.serving.granian_adapter`, its TLS files checked at
start, its connections' upkeep, its busy threads counted), the hooks for gunicorn, the app
built per process for pre-fork servers (gunicorn, uWSGI), the probes in a lane or on a port
of their own (:mod:`~plant_store.serving.probes`), the warning when tokens could travel in
the clear (:mod:`~plant_store.serving.server`), and the metrics subdirectory a pre-fork
master makes for each start and removes at its stop."""
