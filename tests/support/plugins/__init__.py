"""pytest plugins, each of one concern: fixtures and hooks, nothing to import. tests/conftest.py
names them all (``pytest_plugins``)."""
