"""The store contracts (tests/support/suites/: the PlantStore's and the OutboxStore's) on
PostgreSQL: the same tests as tests/unit/stores/test_stores.py and test_outbox_contract.py,
with ``store`` a database of the throwaway cluster."""


from support.suites.plant_store_contract import (  # isort: skip (the suite's order)
    test_create_returns_the_plant_and_stores_it,
    test_replay_is_idempotent,
    test_conflict_leaves_the_stored_plant,
    test_odd_strings_are_kept_exactly,
    test_racing_creates_of_one_id_have_exactly_one_winner,
    test_racing_different_plants_on_one_id_one_wins_the_rest_conflict,
    test_many_threads_many_ids_none_lost,
    test_json_file_store_keeps_everything_across_reopen,
    test_pages_walk_every_plant_once_in_creation_order,
    test_json_file_store_lists_in_creation_order_after_reopen,
    test_delete_removes_the_plant_and_the_id_can_be_created_again,
    test_a_cursor_stays_valid_when_plants_before_and_at_it_are_deleted,
    test_racing_deletes_of_one_id_have_exactly_one_winner,
    test_racing_creates_and_deletes_keep_index_and_file_in_step,
    test_json_file_store_keeps_deletes_across_reopen,
    test_pages_walks_the_whole_store_size_at_a_time_up_to_a_limit,
    test_a_version_never_repeats_for_an_id,
    test_if_none_match_refuses_before_the_equal_body_writes_nothing,
    test_no_history_of_writes_and_retries_overwrites_an_acknowledged_write,
)
from support.suites.outbox_store_contract import (  # isort: skip (the suite's order)
    test_a_create_owes_each_url_a_delivery_of_its_newplant,
    test_lanes_name_each_url_once_and_a_lane_is_oldest_first,
    test_settling_delivers_or_buries_and_a_retry_brings_dead_letters_back,
    test_an_unknown_delivery_cannot_be_settled,
)

STORE_KINDS = ("postgresql",)
