"""The store contracts (tests/support/suites/: the PlantStore's and the OutboxStore's) on
PostgreSQL: the same tests as tests/unit/stores/test_store_contract.py, with ``store`` a
database of the throwaway cluster. A contract test is written once, in its suite."""

from support.suites.outbox_store_contract import *  # noqa: F403 (every test_ of the suite)
from support.suites.plant_store_contract import *  # noqa: F403 (every test_ of the suite)

STORE_KINDS = ("postgresql",)
