"""``postgres`` and ``database_url``: the run's throwaway PostgreSQL server, and a fresh
database in it for each test."""

import itertools
import re

import pytest

from support.pgserver import a_postgres_server

_database_names = itertools.count(1)


@pytest.fixture(scope="session")
def postgres():
    """One throwaway PostgreSQL server for the whole run (tests/support/pgserver.py). Without the
    server binaries the tests that need it skip, and the summary says how many; in CI
    (``CI=true``) they fail instead, since CI must run them."""
    yield from a_postgres_server()


@pytest.fixture
def database_url(postgres, request):
    """A fresh, empty database for this test, dropped afterwards."""
    slug = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())
    name = f"t{next(_database_names)}_{slug}"[:63]
    url = postgres.create_database(name)
    yield url
    postgres.drop_database(name)

