"""What a pip user meets (issue 38): the wheel, built as a release is (``pip wheel
--no-deps .``), installed into a fresh virtual environment outside the clone, with its
dependencies from the package index. Every help text, the example configuration, the errors
of a missing extra and the /docs page's answer name only what that user has: no conf/, no
docs/*.rst, no ``pip install '.[...]'``. And the command they are told to run for the driver,
``pip install 'plant-store[postgresql]'``, is the one that adds it.

Bounded: each pip call has a timeout; about 25 s with a local index, under a minute from
PyPI. Marked slow, as every real-server test of two seconds or more: .ci/run runs it after
the README's command (pytest -m "topology or slow")."""

import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import zipfile

import pytest

from plant_store import config
from plant_store.cli import docs as reference
from plant_store.cli import pages as page_text
from plant_store.cli import program as cli_args
from support.pages import faults
from support.servers import free_port, http_request, wait_answering

# As tests/unit/cli/test_pip_user_texts.py: a clone's folders of configuration and docs, an
# install of '.' with an extra, or the words for it.
CLONE_ONLY = re.compile(r"\bconf/|\bdocs/[\w./-]*\.(?:rst|md)\b|['\"]\.\[|in the clone")
pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parents[2]
PIP_TIMEOUT = 300
DRIVER = ("plant-store: error: store = postgresql needs the PostgreSQL driver, an extra: "
          "pip install 'plant-store[postgresql]'\n")
SKIP_IN_COPY = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "_build", "_generated",
                                      "*.egg-info", "__pycache__", ".*_cache", "tests", "bench",
                                      "test-artifacts")


def run(command, cwd, env, timeout=60):
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(plant-store command, its venv's pip, the wheel's folder, an empty directory, env)."""
    where = tmp_path_factory.mktemp("wheel")
    source = where / "source"  # a copy: the build leaves build/ behind in the tree it reads
    shutil.copytree(ROOT, source, ignore=SKIP_IN_COPY)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PLANT_STORE_", "VIRTUAL_ENV", "PYTHONPATH"))}
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                 str(where / "dist"), str(source)], where, env, PIP_TIMEOUT)
    assert built.returncode == 0, built.stderr
    [wheel] = (where / "dist").glob("plant_store-*.whl")
    venv = where / "venv"
    made = run([sys.executable, "-m", "venv", str(venv)], where, env)
    assert made.returncode == 0, made.stderr
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    done = run([*pip, "install", "-q", str(wheel)], where, env, PIP_TIMEOUT)
    assert done.returncode == 0, done.stderr
    empty = where / "elsewhere"  # not the clone: nothing of it on sys.path or at hand
    empty.mkdir()
    return str(venv / "bin" / "plant-store"), pip, where / "dist", empty, env


def commands():
    """Every command and action's words, from the grammar itself (walked as the unit test
    walks it), so a new command's help is checked too."""
    found = []
    parser = cli_args.parser()

    def walk(parser, words):
        found.append(words)
        for action in parser._actions:
            if hasattr(action, "choices") and isinstance(action.choices, dict):
                for name, sub in action.choices.items():
                    walk(sub, [*words, name])

    walk(parser, [])
    return found


def test_what_a_pip_user_reads_names_no_clone_path(installed):
    plant_store, _, _, empty, env = installed
    said = {}
    helps = commands()
    assert len(helps) > 20
    for words in helps:
        done = run([plant_store, *words, "--help"], empty, env)
        assert done.returncode == 0, done.stderr
        said[" ".join([*words, "--help"])] = done.stdout
    example = run([plant_store, "config", "example"], empty, env)
    said["config example"] = example.stdout
    for words in (["serve", "--port", "0", "--store", "postgresql", "--database-url",
                   "postgresql:///x"], ["db", "check", "--database-url", "postgresql:///x"],
                  ["webhooks", "list", "--store", "postgresql", "--database-url",
                   "postgresql:///x"]):
        done = run([plant_store, *words], empty, env)
        assert (done.returncode, done.stderr) == (2, DRIVER), words
        said[" ".join(words)] = done.stderr
    for words in (["webhooks", "list", "--store", "memory"], ["check"], ["serve", "--port", "x"]):
        done = run([plant_store, *words], empty, env)
        assert done.returncode == 2 and done.stderr.startswith(("plant-store: error:",
                                                                "usage:")), done.stderr
        said[" ".join(words)] = done.stderr

    port = free_port()
    server = subprocess.Popen([plant_store, "serve", "--port", str(port), "--data-dir",
                               str(empty / "data")], cwd=empty, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_answering(port, server)
        status, _, answer = http_request("127.0.0.1", port, "GET", "/docs")
        assert status == 404 and "pip install 'plant-store[docs-page]'" in answer["message"]
        said["GET /docs"] = answer["message"]
        status, _, document = http_request("127.0.0.1", port, "GET", "/openapi.json")
        assert status == 200
        # One version (issue 46): --version, /ready and the document's info.version.
        version = run([plant_store, "--version"], empty, env).stdout.split()[-1]
        ready = http_request("127.0.0.1", port, "GET", "/ready")[2]
        assert version == ready["version"] == document["info"]["version"], (version, ready)
        said["GET /openapi.json"] = str(document)
    finally:
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=30)
    said["serve"] = out + err

    clone_paths = {what: sorted({m.group(0) for m in CLONE_ONLY.finditer(text)})
                   for what, text in said.items()}
    assert {what: found for what, found in clone_paths.items() if found} == {}
    assert "as an INI file to edit and pass to --config" in " ".join(
        said["config example --help"].split())
    assert "'plant-store docs deploying'" in " ".join(said["serve --help"].split())
    # Each page a text names opens from the wheel, outside the clone (issue 46).
    named = {name for text in said.values()
             for name in re.findall(r"plant-store docs ([\w-]+)", " ".join(text.split()))
             if name != "PAGE"}  # the command's own usage
    assert {"deploying", "CONTRACT"} <= named, named
    for name in named:
        done = run([plant_store, "docs", name], empty, env)
        assert done.returncode == 0 and len(done.stdout) > 500, (name, done.stderr)
    listed = run([plant_store, "docs"], empty, env).stdout
    assert "tutorial\t" in listed and "deploying\tDeploy behind a reverse proxy" in listed
    nginx = run([plant_store, "config", "example", "nginx"], empty, env)
    assert nginx.returncode == 0 and "proxy_pass" in nginx.stdout


def test_every_page_the_wheel_lists_is_whole(installed):
    """Issue 50, item 1: the reference pages printed a title and an unfilled include, the
    embedding page two literalincludes of files the wheel lacked, and the pages sent a pip
    user to files only a clone has (.ci/run, bench/README.rst, conf/..., tests/...) in raw
    roles. Each page ``plant-store docs`` lists, printed by the installed wheel: no directive
    or role left, the generated reference and the examples there, every clone path said to
    be one, and the same text the clone renders from the same sources."""
    plant_store, _, dist, empty, env = installed
    [wheel] = dist.glob("plant_store-*.whl")
    carried = set(zipfile.ZipFile(wheel).namelist())
    listed = run([plant_store, "docs"], empty, env)
    names = [line.split("\t")[0] for line in listed.stdout.splitlines()]
    assert listed.returncode == 0 and len(names) > 20, listed.stderr
    printed = {}
    for name in names:
        done = run([plant_store, "docs", name], empty, env)
        assert (done.returncode, done.stderr) == (0, ""), name
        printed[name] = done.stdout
    assert {name: faults(text, carried) for name, text in printed.items()} == {
        name: [] for name in names}
    for setting in config.SETTINGS:
        assert f"- {setting.name}\n" in printed["settings"], setting.name
    assert "\nGET /plants/{id}\n" in printed["http"] and "\n- 412\n" in printed["http"]
    assert "    usage: plant-store token add" in printed["cli"]
    for example in ("test_plants_api.py", "host_app.py"):
        assert f"plant_store/shipped/docs/examples/{example}" in carried
        first = (ROOT / "docs" / "examples" / example).read_text("utf-8").splitlines()[0]
        assert f"\n    {first}\n" in printed["embedding"], example
    generated = reference.generated(cli_args.parser())
    assert printed == {name: page_text.text(name, generated) for name in names}


def test_the_driver_is_added_as_the_error_says(installed):
    plant_store, pip, dist, empty, env = installed
    added = run([*pip, "install", "-q", "--find-links", str(dist), "plant-store[postgresql]"],
                empty, env, PIP_TIMEOUT)
    assert added.returncode == 0, added.stderr
    done = run([plant_store, "db", "check", "--database-url",
                f"postgresql://plants@127.0.0.1:{free_port()}/plants", "--database-timeout",
                "1"], empty, env)
    assert done.returncode == 2 and done.stderr != DRIVER, done.stderr  # a connection error
    assert "127.0.0.1" in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
