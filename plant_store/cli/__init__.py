"""The ``plant-store`` command: its parser and :func:`main` (:mod:`~plant_store.cli.program`,
which adds each command group's module: ``serve``, ``plants``, ``tokens``,
``webhook_commands``, ``store_commands``, ``db``, ``docs``; the pieces in
:mod:`~plant_store.cli.grammar`), moving plants between stores and reading them straight
from one."""

from plant_store.cli.program import main

__all__ = ["main"]
