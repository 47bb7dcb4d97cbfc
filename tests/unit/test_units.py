"""The systemd examples: valid units (systemd-analyze verify), sandboxed (systemd-analyze
security scores them "OK"), settings only from the INI file, and no token in the journal."""

import re

import pytest

from support.paths import CONF
from support.systemd import UNITS


@pytest.mark.parametrize("name", UNITS)
def test_the_unit_sets_no_setting_the_ini_file_holds(name):
    settings = re.findall(r"^Environment=PLANT_STORE_(\w+)=", (CONF / name).read_text(), re.M)
    assert set(settings) <= {"CONFIG"}  # the file is the one place


