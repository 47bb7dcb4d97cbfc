"""The ``plant-store`` command: its grammar (:mod:`~plant_store.cli.args`), the commands
(:mod:`~plant_store.cli.main` runs each command group's module: ``serve``, ``plants``,
``tokens``, ``webhook_commands``, ``store_commands``, ``db``, ``docs``), moving plants
between stores and reading them straight from one."""

from plant_store.cli.main import main

__all__ = ["main"]
