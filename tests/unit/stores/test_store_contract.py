"""The store contracts (tests/support/suites/: the PlantStore's and the OutboxStore's) on the
stores in process: ``store`` (tests/support/plugins/stores.py) is the memory and the JSON-file
store in turn; tests/postgres/test_store_contract.py runs the same suites on PostgreSQL. A
contract test is written once, in its suite: every ``test_`` there is collected here."""

from support.suites.outbox_store_contract import *  # noqa: F403
from support.suites.plant_store_contract import *  # noqa: F403 (every test_ of the suite)
