"""The real-server half of tests/unit/test_embedding.py: the public embedding and testing API:
plant_store.testing, StaticTokens, create_app's refusals, access lines through a host's logging,
and the docs' examples, run as a user would."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).parents[2] / "docs" / "examples"


@pytest.mark.slow
@pytest.mark.parametrize("plugin_in", ["module", "conftest"])
def test_the_docs_webtest_suite_runs_where_a_user_copies_it(tmp_path, plugin_in):
    """Copied with the docs' pytest.ini into an empty directory and run with pytest, as the
    docs say: ``pytest_plugins`` in the test module, or moved to a conftest.py beside it
    (the two places docs/embedding.rst names); no warning (webob's 'cgi' is filtered by
    the pytest.ini, as the page shows how)."""
    shutil.copy(EXAMPLES / "pytest.ini", tmp_path)
    module = (EXAMPLES / "test_plants_api.py").read_text()
    line = 'pytest_plugins = ["plant_store.testing"]\n'
    assert line in module
    if plugin_in == "conftest":
        module = module.replace(line, "")
        (tmp_path / "conftest.py").write_text(line)
    (tmp_path / "test_plants_api.py").write_text(module)
    before = sorted(p.name for p in tmp_path.iterdir())
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_plants_api.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("5 passed in "), done.stdout
    assert "warning" not in done.stdout.lower(), done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no data


def test_the_docs_host_application(tmp_path):
    """docs/examples/host_app.py, imported in a process of its own: mounted at
    /plant-store, its access lines through the host's logging, its store closed by close()."""
    script = f"""
import sys, time, webtest
sys.path.insert(0, {str(EXAMPLES)!r})
import host_app
app = webtest.TestApp(host_app.application)
app.authorization = ("Bearer", "s3cret")
app.post_json("/plant-store/plants", {{"id": 1, "name": "Fern"}})
print(app.get("/plant-store/plants").json)
print(app.get("/").text.strip())
time.sleep(0.2)  # the access lines' flush
host_app.close()
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60,
                          env={**os.environ, "PLANTS_TOKEN": "s3cret",
                               "PLANTS_DATA": str(tmp_path / "plants")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[{'name': 'Fern'}]", "the host application"]
    # The host's format (basicConfig's), not the service's own.
    assert "INFO plant_store.access: 127.0.0.1 POST /plant-store/plants 200 " in done.stderr
    assert (tmp_path / "plants" / "plants.jsonl").exists()


