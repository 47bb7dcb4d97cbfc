"""The real-server half of tests/unit/test_config.py: settings: one table, three sources, flags
win; bad values are refused with their source."""

import subprocess
import sys

from support.paths import EXAMPLE


def test_the_example_file_is_what_config_example_prints():
    """A pip install has no conf/: 'plant-store config example' gives the same file."""
    from plant_store.config import example_ini

    assert EXAMPLE.read_text() == example_ini()
    done = subprocess.run([sys.executable, "-m", "plant_store", "config", "example"],
                          capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (0, example_ini())
