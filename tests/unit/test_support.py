"""docs/support.rst's table says what setup.cfg and the code say."""

import configparser
import pathlib
import re

from packaging.requirements import Requirement

ROOT = pathlib.Path(__file__).parents[2]


def table():
    """{component's first word: (supported, tested)} from the page's list-table."""
    text = (ROOT / "docs" / "support.rst").read_text()
    rows = re.findall(r"^   \* - (.+)\n     - (.+)\n     - (.+)$", text, re.MULTILINE)
    return {component.split()[0]: (supported, tested)
            for component, supported, tested in rows[1:]}


def specifiers():
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    lines = [*setup["options"]["install_requires"].splitlines(),
             *setup["options.extras_require"]["postgresql"].splitlines(),
             *setup["options.extras_require"]["test"].splitlines()]
    found = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            found.setdefault(requirement.name, str(requirement.specifier))
    return setup["options"]["python_requires"], found


def same(spec):
    return ",".join(sorted(spec.split(",")))


def test_the_support_table_matches_setup_cfg_and_the_hooks():
    rows = table()
    python, pinned = specifiers()
    assert rows["Python"][0] == python
    for name in ("falcon", "marshmallow", "waitress", "granian", "psycopg", "psycopg-pool",
                 "prometheus_client", "orjson", "standardwebhooks", "swagger-ui-py"):
        assert same(rows[name][0]) == same(pinned[name]), name
    # Read, not imported: importing the hooks names a metrics directory in os.environ.
    hooks = (ROOT / "plant_store" / "serving" / "gunicorn_hooks.py").read_text()
    oldest = ".".join(re.search(r"^OLDEST = \((\d+), (\d+)\)", hooks, re.MULTILINE).groups())
    assert rows["gunicorn"][0] == f">={oldest}"
    assert same(pinned["gunicorn"]) == same(f">={oldest},<{oldest[:-1]}{int(oldest[-1]) + 1}")
    assert f"oldest supported ({oldest})" in rows["gunicorn"][1]
    assert same(rows["uWSGI"][0]) == same(pinned["pyuwsgi"])


def test_every_capped_dependency_has_its_row_and_its_reason():
    """Issue 46: the page said only six libraries were capped; every upper bound of what
    the service installs (its requirements and its extras, the test tools aside) is in
    the table and named where the page gives the reasons."""
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    extras = setup["options.extras_require"]
    lines = [*setup["options"]["install_requires"].splitlines(),
             *(line for extra in ("postgresql", "docs-page", "granian")
               for line in extras[extra].splitlines())]
    capped = {Requirement(line.split("#", 1)[0].strip()).name
              for line in lines if "<" in line.split("#", 1)[0]}
    rows = table()
    reasons = (ROOT / "docs" / "support.rst").read_text().split("Every dependency", 1)[1]
    for name in capped:
        assert name in rows, name
        assert re.search(rf"\b{re.escape(name.split('-')[0])}", reasons), name


def test_the_adapters_the_page_names_exist():
    text = (ROOT / "docs" / "support.rst").read_text()
    for path in re.findall(r"``(plant_store/[\w/]+\.py)``", text):
        assert (ROOT / path).is_file(), path
