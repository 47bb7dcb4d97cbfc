"""What makes a page of ``plant-store docs PAGE`` whole for a pip user (issue 50, item 1):
what the unit test (the pages rendered in process) and the wheel test (printed by the
installed wheel) both look for in a page's text.

- nothing left unrendered: a directive (``.. include::``, ``.. literalinclude::``, any
  ``.. NAME::``) or a role (``:doc:`x```);
- no file of the clone named without saying so: a path whose first part is one of the
  clone's tracked top-level entries (``.ci/run``, ``bench/README.rst``, ``conf/...``,
  ``tests/...``, ``README.rst``), in a paragraph (with the literal blocks under it) that
  does not say "in a clone", or a path into the package that the wheel does not carry.
"""

import fnmatch
import re

from support.paths import ROOT

DIRECTIVE = re.compile(r"^ *\.\. [\w-]+::", re.MULTILINE)
ROLE = re.compile(r":[\w-]+:`[^`]+`")
SAYS_CLONE = re.compile(r"\b(?:in|of|at)\s+(?:a|the)\s+clone\b|\bthe\s+clone's\b",
                        re.IGNORECASE)
PATH = re.compile(r"(?<![\w/.~$<-])[\w.-]+(?:/[\w.*<>-]*)*")


def clone_entries() -> tuple[set[str], set[str]]:
    """The clone's top-level (folders, files), as git keeps them (what .gitignore names and
    .git aside), the package's own folder aside; read from the disk, as a unit test may."""
    ignored = [line.strip().rstrip("/") for line in
               (ROOT / ".gitignore").read_text("utf-8").splitlines()
               if line.strip() and not line.startswith("#")]
    entries = [path for path in ROOT.iterdir() if path.name not in (".git", "plant_store")
               and not any(fnmatch.fnmatch(path.name, pattern) for pattern in ignored)]
    return ({path.name for path in entries if path.is_dir()},
            {path.name for path in entries if path.is_file()} - {"LICENSE"})  # dist-info has it


def groups(text: str) -> list[str]:
    """A page's paragraphs, each with the indented blocks (literal blocks, a list item's
    lines, a table row's cells) that follow it."""
    found: list[list[str]] = []
    after_blank = True
    for line in text.split("\n"):
        if (line.strip() and not line.startswith(" ") and after_blank) or not found:
            found.append([])
        found[-1].append(line)
        after_blank = not line.strip()
    return ["\n".join(group) for group in found]


def faults(text: str, carried: set[str]) -> list[str]:
    """What keeps ``text`` (a page as printed) from being whole; ``carried`` is every file
    the wheel installs, by its path (``plant_store/config.py``)."""
    found = [f"unrendered directive {m.group(0).strip()!r}" for m in DIRECTIVE.finditer(text)]
    found += [f"raw role {m.group(0)!r}" for m in ROLE.finditer(text)]
    folders, files = clone_entries()
    for group in groups(text):
        says_clone = bool(SAYS_CLONE.search(group))
        for match in PATH.finditer(group):
            path = match.group(0).rstrip(".")
            top, slash, _ = path.partition("/")
            if path.startswith("plant_store/"):
                if not any(name == path or name.startswith(path.rstrip("/") + "/")
                           for name in carried):
                    found.append(f"{path} (the wheel does not carry it)")
            elif (path in files or (slash and top in folders)) and not says_clone:
                line = next(line for line in group.split("\n") if path in line)
                found.append(f"{path} (only a clone has it, not said): {line.strip()}")
    return found
