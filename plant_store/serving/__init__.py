"""Running the app under a server: ``plant-store serve`` on waitress (every waitress internal
in :mod:`~plant_store.serving.waitress_adapter`), the hooks for gunicorn, the app built per
process for pre-fork servers (gunicorn, uWSGI), probes on a port of their own, and the
metrics subdirectory a pre-fork master makes for each start and removes at its stop."""
