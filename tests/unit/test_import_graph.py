"""The layer table of docs/architecture.rst, held against the imports (issue 44): no
module imports one of a higher layer, and no files import each other in a circle. Drawn
from the source (every import, those inside functions and under TYPE_CHECKING too), so
the picture cannot drift from the code."""

import ast
import pathlib

import plant_store

PACKAGE = pathlib.Path(plant_store.__file__).parent
# Each part of the package (a top-level module or a subpackage) and its layer, the ground
# first: a module may import its own layer and those below, never one above.
LAYERS = {
    0: {"__init__", "util", "logs", "events"},
    1: {"stores", "tokens", "config"},
    2: {"http", "webhooks", "metrics"},
    3: {"app"},
    4: {"service", "testing"},
    5: {"serving"},
    6: {"cli", "__main__", "wsgi", "gunicorn_hooks"},
}
LAYER = {part: layer for layer, parts in LAYERS.items() for part in parts}


def modules():
    """Every module's dotted name and its file."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(name, path, known):
    """The package's modules that ``name`` imports: ``from a import b`` names a.b when
    that is a module, else a; and the packages above each (their ``__init__`` runs
    first: importing ``a.b.c`` runs ``a`` and ``a.b``), but for those above ``name``
    itself, which are already being imported when it runs (issue 49, finding 9: a circle
    through a package's ``__init__`` went unseen)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in known else base)
    own = {".".join(name.split(".")[:end]) for end in range(1, name.count(".") + 1)}
    targets |= {".".join(target.split(".")[:end]) for target in set(targets)
                for end in range(1, target.count(".") + 1)} - own
    return {target for target in targets if target in known and target != name}


def part(name):
    pieces = name.split(".")
    return "__init__" if len(pieces) == 1 else pieces[1]


def graph():
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_every_part_of_the_package_has_a_layer():
    assert {part(name) for name in modules()} <= set(LAYER), (
        "a new module or package: give it a layer here and in docs/architecture.rst")


def test_no_import_runs_up_a_layer():
    upward = sorted(f"{name} (layer {LAYER[part(name)]}) imports {target} "
                    f"(layer {LAYER[part(target)]})"
                    for name, targets in graph().items() for target in targets
                    if LAYER[part(target)] > LAYER[part(name)])
    assert upward == []


def test_no_files_import_each_other_in_a_circle():
    edges = graph()
    circles, index, low, stack, on_stack = [], {}, {}, [], set()

    def visit(node):  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    assert circles == []


def test_the_events_import_nothing_of_the_package():
    """Every layer tells plant_store.events what happened (issue 51): it stays the ground,
    so telling it never pulls in what hears it."""
    assert graph()["plant_store.events"] == set()


def test_the_architecture_page_shows_the_same_layers():
    text = (PACKAGE.parent / "docs" / "architecture.rst").read_text()
    for layer, parts in LAYERS.items():
        for name in parts - {"__init__"}:
            assert f"``{name}``" in text, (layer, name)


# What the command line may take of the stores: the interface and what the store packages
# export for it (issue 44: it read the JSON file's journal and ran PostgreSQL queries
# itself). The records and the lock's error are the interface's own words.
CLI_MAY_TAKE = {"plant_store.stores", "plant_store.stores.jsonfile",
                "plant_store.stores.postgres",
                "plant_store.stores.records", "plant_store.stores.outbox",
                "plant_store.stores.lock"}


def test_the_command_line_reaches_the_stores_only_through_what_they_export():
    reached = sorted(f"{name} imports {target}" for name, targets in graph().items()
                     if name.startswith("plant_store.cli") for target in targets
                     if target.startswith("plant_store.stores") and target not in CLI_MAY_TAKE)
    assert reached == []
    for path in (PACKAGE / "cli").glob("*.py"):  # the driver is the store's
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(name.startswith("psycopg") for name in names), path
