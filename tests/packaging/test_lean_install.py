"""The PostgreSQL driver is an extra: without it, choosing its store fails in one line and
nothing else imports it."""

import os
import subprocess
import sys

import pytest

# A Python without psycopg: every import of it fails, as where the extra is not installed.
NO_DRIVER = """
import sys
class _NoDriver:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("psycopg", "psycopg_pool", "psycopg_binary"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _NoDriver())
"""
SAYS = ("plant-store: error: store = postgresql needs the PostgreSQL driver, an extra: "
        "pip install 'plant-store[postgresql]'\n")


def run_without_driver(code, tmp_path):
    return subprocess.run([sys.executable, "-c", NO_DRIVER + code], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args", [
    ["serve", "--port", "0", "--store", "postgresql", "--database-url", "postgresql:///x"],
    ["db", "check", "--database-url", "postgresql:///x"],
])
def test_the_postgresql_store_without_its_driver_is_one_line(tmp_path, args):
    done = run_without_driver(
        f"from plant_store.cli import main\nraise SystemExit(main({args!r}))", tmp_path)
    assert (done.returncode, done.stderr) == (2, SAYS)


def test_nothing_else_imports_the_driver(tmp_path):
    done = run_without_driver("""
import sys, webtest
from plant_store.testing import make_app
import plant_store.wsgi, plant_store.cli.program, plant_store.serving.server
app = webtest.TestApp(make_app(tokens=["t"]))
app.post_json("/plants", {"id": 1, "name": "Fern"}, headers={"Authorization": "Bearer t"})
assert not [m for m in sys.modules if m.startswith("psycopg")]
print("ok")
""", tmp_path)
    assert done.stdout == "ok\n", done.stderr


def test_without_the_docs_page_extra_docs_says_how_to_add_it(tmp_path):
    """swagger-ui-py is the docs-page extra: without it /docs is a 404 in the Error shape
    saying how to install it, and the document is served all the same."""
    (tmp_path / "swagger_ui.py").write_text("")  # a module, not the package: not installed
    done = subprocess.run([sys.executable, "-c", """
import webtest
from plant_store.testing import make_app
app = webtest.TestApp(make_app())
print(app.get("/docs", status=404).json["message"])
app.get("/docs/swagger-ui-bundle.js", status=404)
app.get("/docs/docs_page.js", status=200)
print(app.get("/openapi.json").json["info"]["title"])
"""], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.stdout.splitlines() == [
        "The interactive page is not installed here: pip install 'plant-store[docs-page]'. "
        "The document is at openapi.json.", "Plant Store"
    ], done.stderr
