"""Reading a JSON-file journal in tests, as its records: each run of the store writes its
epoch line before its first create or update (random, so no test can spell it out)."""

import os

EPOCH_LINE = b'{"op":"epoch",'


def records(path: "str | os.PathLike[str]") -> list[bytes]:
    """The lines of the journal at ``path`` (a file, or a data directory), epoch lines
    left out; the file ends with a newline."""
    if os.path.isdir(path):
        path = os.path.join(path, "plants.jsonl")
    with open(path, "rb") as fh:
        data = fh.read()
    assert data.endswith(b"\n") or not data
    return [line for line in data.splitlines() if not line.startswith(EPOCH_LINE)]
