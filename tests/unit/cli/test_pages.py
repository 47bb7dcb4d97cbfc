"""``plant-store docs PAGE`` prints each page whole (issue 50, item 1): the generated
reference (settings, HTTP interface, command line) and the included examples filled in, no
directive or role left raw, and no file only a clone has named without saying so. In
process, from the clone; tests/packaging/test_wheel_install.py checks the same pages as
the installed wheel prints them."""

import json
import re

from plant_store import config
from plant_store.cli import docs as reference
from plant_store.cli import main
from plant_store.cli import pages as page_text
from plant_store.cli import pages as shipped
from plant_store.cli import program as cli_args
from support.pages import clone_entries, faults
from support.paths import ROOT

METHODS = reference.METHODS
GENERATED = reference.generated(cli_args.parser())


def package_files():
    """What the wheel carries of the package, as the clone has it."""
    return {str(path.relative_to(ROOT)) for path in (ROOT / "plant_store").rglob("*")
            if path.is_file() and "__pycache__" not in path.parts}


def test_every_page_is_whole():
    carried = package_files()
    pages = shipped.pages()
    assert len(pages) > 20
    assert {name: faults(page_text.text(name, GENERATED), carried) for name in pages} == {
        name: [] for name in pages}


def test_the_reference_pages_carry_what_the_site_generates():
    settings = page_text.text("settings", GENERATED)
    for setting in config.SETTINGS:
        assert f"- {setting.name}\n" in settings and setting.env in settings, setting.name
    http = page_text.text("http", GENERATED)
    document = json.loads((ROOT / "plant_store" / "http" / "openapi.json").read_text("utf-8"))
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                section = re.split(r"\n[A-Z]+ /\S*\n-", http.split(
                    f"\n{method.upper()} {path}\n")[1])[0]
                for status in operation["responses"]:
                    assert f"\n- {status}\n" in section, (method, path, status)
    cli = page_text.text("cli", GENERATED)
    parser = cli_args.parser()
    commands = next(a for a in parser._actions if isinstance(getattr(a, "choices", None), dict))
    for name in commands.choices:
        assert f"    usage: plant-store {name}" in cli, name
    assert "    usage: plant-store token add" in cli


def test_the_embedding_page_shows_both_examples():
    text = page_text.text("embedding", GENERATED)
    for example in ("test_plants_api.py", "host_app.py"):
        source = (ROOT / "docs" / "examples" / example).read_text("utf-8")
        shown = "\n".join("    " + line if line.strip() else ""
                          for line in source.rstrip("\n").split("\n"))
        assert shown in text, example


def test_docs_prints_the_rendered_page(capsys):
    assert main(["docs", "http"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("The HTTP interface\n") and "\nGET /plants\n" in out
    assert ".. include::" not in out and ":doc:" not in out


def test_the_renderer_turns_markup_into_words():
    source = "\n".join([
        "Title", "=====", "",
        "See :doc:`errors` and :doc:`the tutorial <tutorial>`, :class:`~a.b.Service`,",
        "``plant-store serve``, `Granian <https://example.org>`_ and `A section`_; a",
        "``conf/nginx.conf.example`` and ``.ci/run`` (one note a paragraph), \\*x\\*::", "",
        "    $ ``kept`` :doc:`as written`", "",
        ".. list-table::", "   :header-rows: 1", "",
        "   * - name", "     - default", "     - meaning",
        "   * - ``port``", "     - ``8080``", "     - The port.", "",
        "       Environment ``PLANT_STORE_PORT``.", "",
        ".. contents::", "   :local:", "",
        ".. _a-target:", "",
        "Ends with ``bench/README.rst``.", "",
        ".. unknown:: x", "   body", ""])
    errors = shipped.pages()["errors"]
    assert page_text.render(source, GENERATED) == "\n".join([
        "Title", "=====", "",
        f"See {errors} (plant-store docs errors) and the tutorial (plant-store docs "
        "tutorial),", "Service, plant-store serve, Granian (https://example.org) and "
        "A section; a", "conf/nginx.conf.example (in a clone; plant-store config example "
        "nginx prints it) and", ".ci/run (one note a paragraph), *x*:", "",
        "    $ ``kept`` :doc:`as written`", "",
        "- port", "    default: 8080", "    meaning: The port.", "",
        "    Environment PLANT_STORE_PORT.", "",
        "Ends with bench/README.rst (in a clone of the repository).", "",
        ".. unknown:: x", "   body", ""])


def test_the_renderer_knows_every_top_level_entry_of_the_clone():
    """A file only a clone has is marked by its first part: the lists follow the clone."""
    folders, files = clone_entries()
    assert set(shipped.CLONE_FOLDERS) == folders
    assert set(shipped.CLONE_FILES) == files


def test_the_checks_find_what_the_issue_names():
    assert faults(".. include:: _generated/http.rst\n", set()) == [
        "unrendered directive '.. include::'"]
    assert faults("    .. literalinclude:: examples/host_app.py\n", set()) == [
        "unrendered directive '.. literalinclude::'"]
    assert faults("See :doc:`metrics`.\n", set()) == ["raw role ':doc:`metrics`'"]
    assert faults("Run .ci/run to check.\n", set()) == [
        ".ci/run (only a clone has it, not said): Run .ci/run to check."]
    assert faults("Run it:\n\n    bench/x.py\n\nNext.\n", set()) == [
        "bench/x.py (only a clone has it, not said): bench/x.py"]
    assert faults("In a clone, run:\n\n    bench/x.py\n", set()) == []
    assert faults("plant_store/nowhere.py\n", {"plant_store/config.py"}) == [
        "plant_store/nowhere.py (the wheel does not carry it)"]
    assert faults("plant_store/config.py, /docs, GET /plants/{id}, plant-store docs x\n",
                  {"plant_store/config.py"}) == []
