"""The clone's files the tests read."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"  # the shipped examples
EXAMPLE = CONF / "plant-store.ini"  # the shipped configuration example
