"""``observe_all`` (a batch of latencies counted through a histogram child's attributes)
against prometheus_client's own ``observe``, one amount at a time, on any amounts."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from plant_store import metrics
from plant_store.metrics import prometheus_adapter

AMOUNTS = st.lists(st.one_of(
    st.floats(-1, 50, allow_nan=False), st.sampled_from(metrics.LATENCY),
    st.just(math.inf), st.just(math.nan)), max_size=300)


def exposition(amounts, batched):
    registry = CollectorRegistry()
    histogram = Histogram("t", "t", buckets=metrics.LATENCY, registry=registry)
    if batched:
        prometheus_adapter.observe_all(histogram, amounts)
    else:
        for amount in amounts:
            histogram.observe(amount)
    return {(s.name, s.labels.get("le")): s.value
            for metric in registry.collect() for s in metric.samples}


@settings(max_examples=300, deadline=None)
@given(AMOUNTS)
def test_observe_all_counts_as_observe_one_at_a_time(amounts):
    got, want = exposition(amounts, True), exposition(amounts, False)
    assert got.keys() == want.keys()
    for key, value in want.items():
        if math.isnan(value) or math.isinf(value):
            assert str(got[key]) == str(value), key  # the sum: NaN or inf alike
        else:
            assert math.isclose(got[key], value, rel_tol=1e-9, abs_tol=1e-9), key
