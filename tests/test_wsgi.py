"""``plant_store.wsgi:application`` is a plain WSGI app configured from the environment."""

import os
import subprocess
import sys
import textwrap


def test_wsgi_module_builds_the_app_from_the_environment(tmp_path):
    script = textwrap.dedent("""
        import webtest
        from plant_store.tokens import TokenFile
        token = TokenFile(%r).add("wsgi")
        from plant_store.wsgi import application
        app = webtest.TestApp(application)
        r = app.post_json("/plants", {"id": 1, "name": "x"},
                          headers={"Authorization": "Bearer " + token})
        print(r.status_int, r.json)
    """) % str(tmp_path / "tokens.json")
    env = {**os.environ, "PLANT_STORE_DATA_DIR": str(tmp_path), "PLANT_STORE_LOG_LEVEL": "error"}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=30)
    assert result.stdout.strip() == "200 {'name': 'x'}", result.stderr
    assert (tmp_path / "plants.jsonl").read_bytes().count(b"\n") == 1
