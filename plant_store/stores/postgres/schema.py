"""The SQL, in files shipped in the package, read here: the named queries of
``sql/queries.sql`` (:data:`QUERIES`: Python never builds SQL from strings), and the schema,
from numbered plain SQL files (``sql/migrations/``).

Migrations run in one transaction under an advisory lock, so instances starting together
apply each exactly once (the others wait, then find nothing pending), and a failed one
leaves the schema as it was. ``plant_store_schema`` records what was applied, and for each
the oldest migration an instance must know to serve on it (``compatible_from``, from a
``-- compatible-from: N`` line of a contract step; see 0005): :func:`too_new` says when
this version is older than the schema it finds.
"""

import importlib.resources
import re

import psycopg

_NAME = re.compile(r"^-- name: (\w+)\n", re.MULTILINE)


def load() -> dict[str, str]:
    """The named queries, by name."""
    sql = importlib.resources.files(__package__).joinpath("sql")
    text = sql.joinpath("queries.sql").read_text("utf-8")
    parts = _NAME.split(text)[1:]  # name, body, name, body, ...
    return dict(zip(parts[::2], (body.strip() for body in parts[1::2]), strict=True))


QUERIES = load()

LOCK_KEY = 0x706C616E7473  # "plants": the advisory lock that serializes migrations
_FILE = re.compile(r"(\d{4})_(\w+)\.sql")
_COMPATIBLE = re.compile(r"^-- compatible-from: (\d+)$", re.MULTILINE)
COMPATIBILITY = 5  # the migration that made plant_store_schema.compatible_from


def available() -> list[tuple[int, str, str]]:
    """(version, name, SQL) of every migration shipped, in order."""
    folder = importlib.resources.files(__package__).joinpath("sql").joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        match = _FILE.fullmatch(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text("utf-8")))
    return sorted(found)


def newest() -> int:
    """The newest migration this version knows."""
    return available()[-1][0]


def too_new(conn: psycopg.Connection) -> str | None:
    """Why this version cannot serve the schema it finds (a migration it does not know
    that earlier versions cannot serve beside), or None."""
    if COMPATIBILITY not in applied(conn):
        return None
    row = conn.execute("SELECT max(compatible_from) FROM plant_store_schema").fetchone()
    needed = row[0] if row else None
    if needed is None or needed <= newest():
        return None
    return (f"the database's schema needs Plant Store with migration {needed:04d} or newer; "
            f"this version knows up to {newest():04d}: upgrade this instance")


def applied(conn: psycopg.Connection) -> set[int]:
    # A SELECT with no FROM answers one row: fetchone() is never None here.
    if conn.execute("SELECT to_regclass('plant_store_schema')").fetchone()[0] is None:  # type: ignore[index]
        return set()
    return {row[0] for row in conn.execute("SELECT version FROM plant_store_schema")}


def pending(conn: psycopg.Connection) -> list[str]:
    """Names of the migrations not applied yet; changes nothing."""
    done = applied(conn)
    return [name for version, name, _ in available() if version not in done]


def migrate(conn: psycopg.Connection) -> list[str]:
    """Apply what is pending, all in one transaction; return the names applied."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
        conn.execute("CREATE TABLE IF NOT EXISTS plant_store_schema ("
                     " version integer PRIMARY KEY, name text NOT NULL,"
                     " applied_at timestamptz NOT NULL DEFAULT now())")
        done = applied(conn)
        names = []
        for version, name, sql in available():
            if version not in done:
                conn.execute(sql)
                if version >= COMPATIBILITY:
                    declared = _COMPATIBLE.search(sql)
                    conn.execute("INSERT INTO plant_store_schema (version, name, compatible_from)"
                                 " VALUES (%s, %s, %s)",
                                 [version, name, int(declared.group(1)) if declared else None])
                else:
                    conn.execute("INSERT INTO plant_store_schema (version, name) "
                                 "VALUES (%s, %s)", [version, name])
                names.append(name)
    return names
