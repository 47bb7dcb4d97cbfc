"""The OutboxStore contract (tests/support/suites/outbox_store_contract.py) on the stores in
process: ``store`` (conftest's) is the memory and the JSON-file store in turn; on PostgreSQL
by tests/integration/test_store_contract_postgresql.py."""

from support.suites.outbox_store_contract import (  # isort: skip (the suite's order)
    test_a_create_owes_each_url_a_delivery_of_its_newplant,
    test_lanes_name_each_url_once_and_a_lane_is_oldest_first,
    test_settling_delivers_or_buries_and_a_retry_brings_dead_letters_back,
    test_an_unknown_delivery_cannot_be_settled,
)
