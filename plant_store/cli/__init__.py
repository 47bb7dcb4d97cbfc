"""The ``plant-store`` command: its grammar (:mod:`~plant_store.cli.args`), the commands
(:mod:`~plant_store.cli.main`), moving plants between stores and reading them straight from
one."""

from plant_store.cli.main import main

__all__ = ["main"]
