"""docs/architecture.rst walks one create from the socket to the store (issue 51): every
file it names, with the function or class named beside it, must exist in the code, so the
page a newcomer reads first cannot drift from what runs."""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.rst"
# A step names ``plant_store/a/b.py`` and then, after spaces or a line break, ``Name`` or
# ``Class.method``.
STEP = re.compile(r"``(plant_store/[\w/]+\.py)``\s+``([A-Za-z_][\w.]*)``")


def walk_text():
    text = PAGE.read_text()
    start = text.index("One create, from the socket to the store and back")
    return text[start:text.index("\nEvents\n------", start)]


def defined(path, dotted):
    """Whether ``dotted`` (a name, or Class.method) is defined at the top of ``path``."""
    scope = ast.parse((ROOT / path).read_text()).body
    for part in dotted.split("."):
        found = None
        for node in scope:
            names = ([t.id for t in node.targets if isinstance(t, ast.Name)]
                     if isinstance(node, ast.Assign) else
                     [node.target.id] if isinstance(node, ast.AnnAssign)
                     and isinstance(node.target, ast.Name) else
                     [getattr(node, "name", None)])
            if part in names:
                found = node
                break
        if found is None:
            return False
        scope = getattr(found, "body", [])
    return True


def test_every_file_and_name_on_the_walk_is_in_the_code():
    steps = STEP.findall(walk_text())
    assert len(steps) >= 20, f"the walk names too few steps to be the walk: {steps}"
    missing = [f"{path} {name}" for path, name in steps
               if not (ROOT / path).is_file() or not defined(path, name)]
    assert not missing, "docs/architecture.rst's walk names what the code lacks: " + ", ".join(
        missing)


def test_the_check_fails_for_a_name_the_code_lacks():
    assert defined("plant_store/http/plants.py", "PlantsResource.on_post")
    assert not defined("plant_store/http/plants.py", "PlantsResource.on_patch")
    assert not defined("plant_store/http/plants.py", "NoSuchThing")
