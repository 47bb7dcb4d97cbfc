"""What a pip user meets names only what a pip user has (issue 38): help texts, the example
configuration, error messages and answers point at a documentation page by its title,
``plant-store config example`` or ``pip install 'plant-store[...]'``, never at a clone's
files (conf/, docs/*.rst, ``pip install '.[...]'``). In process: every help text rendered,
and every string literal of the package (docstrings and comments aside) scanned, so a new
message cannot bring a clone path back. tests/packaging/test_wheel_install.py checks the
same outputs from the installed wheel."""

import argparse
import ast
import io
import json
import pathlib
import re
from contextlib import redirect_stderr, redirect_stdout

import pytest

import plant_store
from plant_store import config
from plant_store.cli import main
from plant_store.cli import pages as shipped
from plant_store.cli import program as cli_args
from plant_store.http import operational as docs_page
from plant_store.stores import StoreError, needs_driver

PACKAGE = pathlib.Path(plant_store.__file__).parent
# What only a clone has: its folders of configuration and docs, an install of '.' with an
# extra, or the words for it.
CLONE_ONLY = re.compile(r"\bconf/|\bdocs/[\w./-]*\.(?:rst|md)\b|['\"]\.\[|in the clone")


def clone_only(text):
    return sorted({m.group(0) for m in CLONE_ONLY.finditer(text)})


def every_help():
    """Each command's --help as argparse renders it, the top one first."""
    def walk(parser):
        yield parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in dict.fromkeys(action.choices.values()):
                    yield from walk(sub)

    return list(walk(cli_args.parser()))


def test_the_pattern_finds_what_the_issue_names():
    assert clone_only("see docs/deploying.rst") == ["docs/deploying.rst"]
    assert clone_only("(conf/plant-store.ini is this)") == ["conf/"]
    assert clone_only("pip install '.[postgresql]' in the clone") == ["'.[", "in the clone"]
    assert clone_only("pip install 'plant-store[postgresql]'; see /docs") == []


def test_no_help_text_names_a_clone_path():
    helps = every_help()
    assert len(helps) > 20  # every command and action
    assert {text: clone_only(text) for text in helps if clone_only(text)} == {}
    serve = next(text for text in helps if text.startswith("usage: plant-store serve"))
    assert "'plant-store docs deploying'" in " ".join(serve.split())


NAMED = re.compile(r"plant-store docs ([\w-]+)")


def test_every_page_a_text_names_opens_and_every_example_prints():
    """Issue 46: help texts and errors sent pip users to pages they did not have. Each
    page a help text, a string of the package or the OpenAPI document names, by the
    command that prints it, is there; so is each example configuration."""
    from plant_store.cli import pages as shipped

    texts = [*every_help(), (PACKAGE / "http" / "openapi.json").read_text()]
    for path in PACKAGE.rglob("*.py"):
        texts += [node.value for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    named = {name for text in texts for name in NAMED.findall(" ".join(text.split()))
             if name != "PAGE"}  # the command's own usage
    assert {"deploying", "processes", "CONTRACT"} <= named
    pages = shipped.pages()
    for name in named:
        assert name in pages and shipped.page(name).strip(), name
    assert pages["deploying"] == "Deploy behind a reverse proxy"
    for name in shipped.EXAMPLES:
        assert shipped.example(name).strip(), name


def test_docs_lists_and_prints_pages(capsys):
    assert main(["docs"]) == 0
    listed = capsys.readouterr().out
    assert "tutorial\t" in listed and "CONTRACT\tPlant Store: the contract" in listed
    assert main(["docs", "durability"]) == 0
    assert capsys.readouterr().out.startswith("Durability: fsync, group commit, crash safety")
    assert main(["docs", "nope"]) == 2
    assert "there is no page 'nope'" in capsys.readouterr().err
    assert main(["config", "example", "nginx"]) == 0
    assert "proxy_pass" in capsys.readouterr().out


def test_docs_prints_only_the_pages_it_ships(capsys, tmp_path):
    """Issue 49, finding 8: PAGE is a name from the listing, never a path: a traversal
    out of docs/ or an absolute path to a readable .md or .rst file is no page."""
    secret = tmp_path / "secret.md"
    secret.write_text("# not a page\nsecret\n")
    docs = shipped._folder("docs")
    relative = pathlib.Path(*[".."] * len(pathlib.Path(str(docs)).parts),
                            secret.relative_to("/"))
    for name in (str(relative.with_suffix("")), str(secret.with_suffix("")),
                 "../README", "./tutorial", "tutorial/../tutorial", "", "."):
        assert main(["docs", name]) == 2, name
        captured = capsys.readouterr()
        assert "secret" not in captured.out and captured.out == "", name
        assert f"there is no page {name!r}" in captured.err, name
    with pytest.raises(KeyError):
        shipped.page(str(secret.with_suffix("")))


def test_config_help_and_example_name_the_command_not_the_file():
    example = config.example_ini()
    assert clone_only(example) == []
    helps = " ".join(" ".join(every_help()).split())
    assert "as an INI file to edit and pass to --config" in helps


def test_the_missing_driver_says_the_pip_command_that_works_from_pypi():
    with pytest.raises(StoreError) as caught, needs_driver():
        raise ModuleNotFoundError("No module named 'psycopg'", name="psycopg")
    assert str(caught.value) == ("store = postgresql needs the PostgreSQL driver, an extra: "
                                 "pip install 'plant-store[postgresql]'")


def test_the_missing_docs_page_says_the_pip_command_that_works_from_pypi():
    assert "pip install 'plant-store[docs-page]'" in docs_page.NOT_INSTALLED
    assert clone_only(docs_page.NOT_INSTALLED) == []
    document = json.loads((PACKAGE / "http" / "openapi.json").read_text())
    examples = document["paths"]["/docs"]["get"]["responses"]["404"]["content"][
        "application/json"]["example"]
    assert examples["message"] == docs_page.NOT_INSTALLED


def strings_users_may_see(path):
    """The string literals of a module, its docstrings left out (comments are not literals);
    f-strings' constant parts included."""
    tree = ast.parse(path.read_text("utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and id(node) not in docstrings]


def test_no_message_of_the_package_names_a_clone_path():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for text in strings_users_may_see(path):
            if clone_only(text):
                found.setdefault(str(path.relative_to(PACKAGE)), []).append(text)
    for path in sorted(PACKAGE.rglob("*.json")):
        if clone_only(path.read_text("utf-8")):
            found[str(path.relative_to(PACKAGE))] = clone_only(path.read_text("utf-8"))
    assert found == {}


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue(), err.getvalue()


def test_the_docs_pages_name_config_example_where_they_send_readers_to_the_file():
    docs = PACKAGE.parent / "docs"
    if not docs.is_dir():
        pytest.skip("not a clone: the docs are not here")
    for page in ("settings.rst", "embedding.rst"):
        text = (docs / page).read_text("utf-8")
        assert "``plant-store config example``" in text, page
        assert "conf/plant-store.ini" not in text or "config example" in text.split(
            "conf/plant-store.ini")[0], page


@pytest.mark.parametrize("name,expected", [
    ("Fern", "2\tFern\n"),  # no tag: no third field, no trailing tab
    ("Monstera", "1\tMonstera\taroid\n"),
])
def test_plants_list_prints_a_tag_only_when_there_is_one(tmp_path, name, expected):
    from plant_store.stores import JsonFileStore
    from plant_store.stores.records import Plant

    with JsonFileStore(str(tmp_path)) as store:
        store.create(Plant(1, "Monstera", "aroid"))
        store.create(Plant(2, "Fern"))
        store.create(Plant(3, "Empty", ""))
    status, out, err = run("plants", "list", "--data-dir", str(tmp_path))
    assert (status, err) == (0, "")
    assert expected in out
    assert out.endswith("3\tEmpty\t\n")  # an empty tag is a tag: its field is there, empty


def test_webhooks_docs_say_the_wait_the_command_waits():
    from plant_store.webhooks import worker

    docs = PACKAGE.parent / "docs"
    if not docs.is_dir():
        pytest.skip("not a clone: the docs are not here")
    text = " ".join((docs / "webhooks.rst").read_text("utf-8").split())
    assert f"waits up to {worker.IDLE + 2:g} s for it to be taken" in text
    assert f"looks every {worker.IDLE:g} s" in text
    assert "within 5 s. One that" not in text  # the old promise, shorter than the wait


def test_errors_doc_says_the_token_is_checked_before_404_and_405():
    docs = PACKAGE.parent / "docs"
    if not docs.is_dir():
        pytest.skip("not a clone: the docs are not here")
    text = " ".join((docs / "errors.rst").read_text("utf-8").split())
    assert "the token is checked first" in text


def test_a_serve_that_cannot_listen_leaves_nothing_in_a_folder_it_never_used(tmp_path):
    """The port is taken (bound without SO_REUSEADDR, so waitress's bind fails too)."""
    import socket

    data = tmp_path / "never-used"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        status, _, err = run("serve", "--data-dir", str(data), "--port", str(port))
    assert status == 2, err
    assert err == (f"plant-store: error: setting port='{port}' (from flag --port): cannot "
                   f"listen on 127.0.0.1:{port}: Address already in use\n")
    assert not data.exists()


def test_a_serve_whose_probe_port_is_taken_leaves_nothing_either(tmp_path):
    import socket

    data = tmp_path / "never-used"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        status, _, err = run("serve", "--data-dir", str(data), "--port", "0",
                             "--probe-port", str(port))
    assert status == 2, err
    assert err == (f"plant-store: error: setting probe_port='{port}' (from flag --probe-port): "
                   f"cannot listen on 127.0.0.1:{port}: Address already in use\n")
    assert not data.exists()
