"""schemathesis against the app in-process (WSGI, no network), over every operation the
served document lists, with the checks the contract calls for and none switched off.

schemathesis itself leaves out the operation that serves the document it was loaded from
(GET /openapi.json); test_openapi.py checks that one directly."""

import io
from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, assume, settings
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.parameters import ParameterLocation

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.http import etags
from plant_store.stores import MemoryStore
from plant_store.stores.records import Plant
from plant_store.tokens import TokenFile

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    positive_data_acceptance,
    negative_data_rejection,
]


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    tokens = TokenFile(str(tmp_path_factory.mktemp("conformance") / "tokens.json"))
    tokens.token = tokens.add("schemathesis")
    return tokens


def make_app(tokens, store=None):
    store = store if store is not None else MemoryStore()
    return create_app(Config(store="memory"), store=store, tokens=tokens,
                      log_stream=io.StringIO())


# The document as the service serves it, fetched through its own app; the path is public,
# so the loader's app never opens its token file.
schema = schemathesis.openapi.from_wsgi("/openapi.json", make_app(TokenFile("unused")))


@pytest.fixture(scope="module")
def generated(pytestconfig):
    """Cases per operation and generation mode, printed at the end of the module."""
    counts = Counter()
    yield counts
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        for (label, mode), n in sorted(counts.items()):
            reporter.write_line(f"schemathesis: {label} {mode}: {n} cases")


@schema.parametrize()
@settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
def test_every_operation_conforms(case, tokens, generated):
    # JSON Schema counts 1.0 as an integer; the contract does not (the document says so in
    # words), because such ids go through floating point and large ones would change.
    positive = case.meta.generation.mode.value == "positive"
    assume(not (positive and isinstance(case.body, dict)
                and isinstance(case.body.get("id"), float)))
    # A fresh store per case: a valid NewPlant must get 200, not a 409 left by an
    # earlier example that used the same id with another name.
    generated[case.operation.label, case.meta.generation.mode.value] += 1
    # The token goes in unless this case mutated the headers, which for a bearer scheme
    # means the Authorization header itself: putting it back would undo the mutation.
    headers = {}
    if not case.meta.is_negative_at(ParameterLocation.HEADER):
        headers["Authorization"] = f"Bearer {tokens.token}"
    store = MemoryStore()
    # A GET, PUT or DELETE of an even id finds its plant (200, 204), of an odd one nothing
    # (404); ids beyond int64 (negative cases) cannot be stored, and get a 400.
    plant_id = (case.path_parameters or {}).get("id")
    if (case.method in ("GET", "PUT", "DELETE") and type(plant_id) is int
            and plant_id % 2 == 0 and -2**63 <= plant_id < 2**63):
        stored = Plant(plant_id, "to change")
        store.create(stored)
        # A valid If-Match that names no current ETag is a 412 (its own tests show that);
        # here a positive case names the current one too, so it is accepted.
        if (positive and case.headers and "If-Match" in case.headers
                and not etags.parse(case.headers["If-Match"])[0]):  # not "*"
            case.headers["If-Match"] += f", {etags.etag(store.fetch(plant_id).version)}"
    # A PUT body's optional id must be the path's (400 otherwise, as the document says).
    if positive and case.method == "PUT" and isinstance(case.body, dict) and "id" in case.body:
        case.body["id"] = plant_id
    case.call_and_validate(app=make_app(tokens, store), headers=headers, checks=CHECKS)
