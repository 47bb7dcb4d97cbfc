"""The real-server half of tests/unit/test_units.py: the systemd examples: valid units
(systemd-analyze verify), sandboxed (systemd-analyze security scores them "OK"), settings only
from the INI file, and no token in the journal."""

import re
import shutil
import subprocess

import pytest

from support.paths import CONF
from support.servers import Server
from support.systemd import OK, UNITS, analyze


@pytest.mark.parametrize("name", UNITS)
def test_the_unit_is_sandboxed(tmp_path, name):
    unit = tmp_path / name.removesuffix(".example")
    shutil.copy(CONF / name, unit)
    done = subprocess.run([analyze(), "security", "--offline=true", str(unit)],
                          capture_output=True, text=True, timeout=60)
    score = re.search(r"Overall exposure level for \S+: ([0-9.]+) (\w+)", done.stdout)
    assert score, done.stdout + done.stderr
    assert float(score.group(1)) < OK and score.group(2) == "OK", score.group(0)


@pytest.mark.parametrize("name", UNITS)
def test_the_unit_is_valid(tmp_path, name):
    """verify wants the executables and the user to exist: /bin/true and root stand in."""
    text = re.sub(r"^ExecStart=(.*\\\n)*.*$", "ExecStart=/bin/true", (CONF / name).read_text(),
                  flags=re.M)
    text = re.sub(r"^(User|Group)=plant-store$", r"\1=root", text, flags=re.M)
    unit = tmp_path / name.removesuffix(".example")
    unit.write_text(text)
    done = subprocess.run([analyze(), "verify", str(unit)], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


def test_under_systemd_no_token_is_made_or_printed(tmp_path):
    """The journal is readable by whoever reads the logs: serve says how to make a token."""
    with Server(tmp_path / "data", env={"JOURNAL_STREAM": "8:12345"}) as server:
        assert server.request("GET", "/plants", token="anything")[0] == 401
        server.stop()
    output = "".join(server.stdout + server.stderr)
    assert "shown only this once" not in output
    assert "no tokens in " in output and "plant-store token add --token-file" in output
    assert not (tmp_path / "data" / "tokens.json").exists()


def test_no_first_token_makes_and_prints_none(tmp_path):
    with Server(tmp_path / "data", "--no-first-token") as server:
        server.stop()
    output = "".join(server.stdout + server.stderr)
    assert "shown only this once" not in output and "no tokens in " in output
    assert not (tmp_path / "data" / "tokens.json").exists()
