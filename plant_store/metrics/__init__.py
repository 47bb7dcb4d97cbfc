"""The service's Prometheus metrics: what it counts (:mod:`.counters`, the one
implementation of :class:`plant_store.events.Events` that counts), the ended workers'
counts of a pre-fork server (:mod:`.archive`), and every reach into prometheus_client's
private names (:mod:`.prometheus_adapter`, pinned by tests/unit/test_library_pins.py)."""

from plant_store.metrics.counters import (
    LATENCY,
    Metrics,
    NoMetrics,
    StoreTimings,
    for_config,
    timings_for,
)

__all__ = ["LATENCY", "Metrics", "NoMetrics", "StoreTimings", "for_config", "timings_for"]
