"""The ``plant-store`` command: its parser and :func:`main` (:mod:`~plant_store.cli.program`),
the pieces its commands are built with (:mod:`~plant_store.cli.grammar`), and a module for
each family of commands, by what they act on: ``serve``; ``plants`` (looked at, exported,
imported); ``store_commands`` (the store whole, its PostgreSQL schema, its tokens);
``webhook_commands``; ``docs`` (its pages, from :mod:`~plant_store.cli.pages`, and the
generated reference)."""

from plant_store.cli.program import main

__all__ = ["main"]
