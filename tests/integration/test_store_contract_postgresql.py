"""The store contracts of tests/unit/stores/ (the plant operations', test_stores.py, and
the outbox protocol's, test_outbox_contract.py), on PostgreSQL: the same tests, collected
here with ``store`` a database of the throwaway cluster."""

from conftest import store_contract

STORE_KINDS = ("postgresql",)
globals().update(store_contract())
globals().update(store_contract("test_outbox_contract.py"))
