"""The store contract of tests/unit/stores/test_stores.py, on PostgreSQL: the same tests,
collected here with ``store`` a database of the throwaway cluster."""

from conftest import store_contract

STORE_KINDS = ("postgresql",)
globals().update(store_contract())
