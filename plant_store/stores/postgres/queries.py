"""The named queries of ``sql/queries.sql``: Python never builds SQL from strings."""

import importlib.resources
import re

_NAME = re.compile(r"^-- name: (\w+)\n", re.MULTILINE)


def load() -> dict[str, str]:
    sql = importlib.resources.files(__package__).joinpath("sql")
    text = sql.joinpath("queries.sql").read_text("utf-8")
    parts = _NAME.split(text)[1:]  # name, body, name, body, ...
    return dict(zip(parts[::2], (body.strip() for body in parts[1::2]), strict=True))


QUERIES = load()
