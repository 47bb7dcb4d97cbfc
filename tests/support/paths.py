"""The clone's files the tests read."""

import pathlib

ROOT = pathlib.Path(__file__).parents[2]
CONF = ROOT / "conf"  # the shipped examples
EXAMPLE = CONF / "plant-store.ini"  # the shipped configuration example
UNIT = ROOT / "tests" / "unit"  # runs in process and starts nothing
