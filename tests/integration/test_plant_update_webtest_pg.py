"""tests/support/suites/plant_update.py, every row, through WebTest on the PostgreSQL store
(tests/unit/http/test_plant_update.py runs it on the memory and JSON-file stores; tests/unit
may start no database)."""

import io

import pytest
import webtest

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.stores.postgres import PostgresStore

from support.suites.plant_update import (  # isort: skip (the suite's order)
    fern,
    test_get_answers_the_plant_without_id_and_a_strong_etag,
    test_head_answers_the_headers_alone,
    test_a_plant_without_tag_has_none_in_its_body,
    test_if_none_match_naming_the_current_etag_is_304,
    test_if_none_match_naming_another_etag_is_200,
    test_get_of_an_unknown_id_is_404,
    test_get_of_an_id_not_an_int64_is_400,
    test_a_malformed_conditional_header_is_400_naming_it,
    test_put_replaces_name_and_tag_and_answers_the_new_etag,
    test_put_without_tag_removes_it,
    test_an_updated_plant_keeps_its_place_in_the_listing,
    test_put_with_if_match_naming_the_current_etag_is_200,
    test_put_with_a_stale_or_weak_if_match_is_412_and_changes_nothing,
    test_a_retried_conditional_update_is_200,
    test_lost_update_is_prevented,
    test_put_to_an_unknown_id_is_404_and_creates_nothing,
    test_put_with_an_id_other_than_the_paths_is_400_naming_id,
    test_put_with_the_paths_id_in_the_body_is_accepted,
    test_an_invalid_body_is_400_naming_the_field,
    test_a_body_that_is_not_a_json_object_is_400,
    test_wrong_content_type_is_415,
    test_a_body_too_large_is_413,
    test_a_body_equal_to_the_stored_plant_writes_nothing,
    test_post_after_an_update_replays_the_new_plant_and_conflicts_with_the_old,
    test_an_update_owes_no_webhook,
    test_delete_with_a_stale_or_weak_if_match_is_412_and_keeps_the_plant,
    test_delete_with_the_current_etag_is_204,
    test_an_etag_after_delete_and_create_again,
    test_a_retried_put_never_overwrites_a_later_acknowledged_one,
    test_the_tag_filter_is_exact_in_creation_order_and_its_next_link_keeps_it,
    test_the_next_link_of_a_tag_listing_stays_within_a_proxys_header_buffer,
    test_the_tag_filter_follows_updates,
    test_a_repeated_tag_or_an_unknown_parameter_is_400,
    test_a_long_if_match_list_is_parsed_up_to_its_bound,
    test_a_conditional_header_past_its_bound_is_431_before_the_store,
    test_if_none_match_star_on_put_and_delete_never_replaces_a_stored_plant,
    test_both_conditions_must_hold,
    test_get_with_a_stale_if_match_is_412,
    test_the_documents_plant_update_is_the_schemas,
)

pytestmark = pytest.mark.slow  # real servers and PostgreSQL: .ci/run runs them after the suite


@pytest.fixture
def app(database_url, tokens, token):
    store = PostgresStore(database_url, timeout=5)
    config = Config(store="postgresql", database_url=database_url, page_size=2,
                    max_body_size=1024)
    test_app = webtest.TestApp(
        create_app(config, store=store, tokens=tokens, log_stream=io.StringIO()),
        extra_environ={"HTTP_AUTHORIZATION": f"Bearer {token}"})
    test_app.store = store
    yield test_app
    store.close()
