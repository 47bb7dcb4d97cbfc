"""The names users import, put in a server's command line or filter logs on keep working
whatever the package's layout (issue 35 moved most modules into layers)."""

import importlib
import logging
import pathlib

import pytest

import plant_store

PUBLIC = [
    ("plant_store.wsgi", "application"),
    ("plant_store.app", "create_app"),
    ("plant_store.testing", "make_app"),
    ("plant_store.testing", "plant_store_app"),
    ("plant_store.gunicorn_hooks", "post_worker_init"),
    ("plant_store.cli", "main"),  # the plant-store command's entry point
    ("plant_store.tokens", "TokenFile"),
    ("plant_store.tokens", "StaticTokens"),
    ("plant_store.stores", "open_store"),
    ("plant_store.stores", "MemoryStore"),
    ("plant_store.stores", "JsonFileStore"),
    ("plant_store.config", "SETTINGS"),
    ("plant_store.config", "Config"),
    ("plant_store.service", "Service"),
    ("plant_store.webhooks", "start"),
    ("plant_store.metrics", "Metrics"),
]


@pytest.mark.parametrize(("module", "name"), PUBLIC)
def test_each_public_name_imports(module, name, monkeypatch, tmp_path):
    # gunicorn_hooks names a metrics directory at import when none is set: give it one.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert getattr(importlib.import_module(module), name) is not None


def test_the_console_script_names_the_cli_main():
    setup = (pathlib.Path(__file__).parents[2] / "setup.cfg").read_text()
    assert "plant-store = plant_store.cli:main" in setup


# Logger names from before the move: operators' logging configs filter on them.
LOGGERS = {
    "plant_store.serving.server": "plant_store.server",
    "plant_store.serving.lazy_app": "plant_store.lazy_app",
    "plant_store.serving.probes": "plant_store.probe_port",
    "plant_store.serving.waitress_loop": "plant_store.waitress_adapter",
    "plant_store.webhooks.worker": "plant_store.webhooks",
    "plant_store.webhooks.retry_requests": "plant_store.retry_requests",
    "plant_store.http.errors": "plant_store.errors",
    "plant_store.http.access_log": "plant_store.access",
    "plant_store.cli.serve": "plant_store.cli",  # serve's lines (in cli.main before issue 44)
    "plant_store.stores.jsonfile.store": "plant_store.stores.jsonfile",
    "plant_store.stores.jsonfile.appendlog": "plant_store.stores.appendlog",
    # The PostgreSQL store's parts log under the store's name (issue 44 split them out).
    "plant_store.stores.postgres.attempts": "plant_store.stores.postgres.store",
    "plant_store.stores.postgres.connection": "plant_store.stores.postgres.store",
    "plant_store.stores.postgres.store": "plant_store.stores.postgres.store",
}


@pytest.mark.parametrize(("module", "logger"), sorted(LOGGERS.items()))
def test_log_lines_keep_their_logger_names(module, logger):
    loaded = importlib.import_module(module)
    names = {value.name for value in vars(loaded).values() if isinstance(value, logging.Logger)}
    assert logger in names


def test_at_most_fifteen_modules_stay_at_the_top():
    top = pathlib.Path(plant_store.__file__).parent
    modules = sorted(path.name for path in top.glob("*.py"))
    assert len(modules) <= 15, modules
    layers = {path.name for path in top.iterdir() if (path / "__init__.py").exists()}
    assert {"http", "serving", "webhooks", "cli", "stores", "util"} <= layers


def test_the_gunicorn_config_module_carries_every_setting_and_hook(monkeypatch, tmp_path):
    """The hooks live in serving/ (issue 44); ``-c python:plant_store.gunicorn_hooks``
    reads the names of that module, so each gunicorn setting or hook the real module
    defines is named there too."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    from gunicorn.config import KNOWN_SETTINGS

    known = {setting.name for setting in KNOWN_SETTINGS}
    real = importlib.import_module("plant_store.serving.gunicorn_hooks")
    public = importlib.import_module("plant_store.gunicorn_hooks")
    defined = {name for name in vars(real) if name in known}
    assert {"on_starting", "post_worker_init", "child_exit", "logger_class"} <= defined
    assert {name: getattr(public, name, None) for name in defined} == {
        name: getattr(real, name) for name in defined}
