"""Every reach into prometheus_client's private names (tests/unit/test_library_pins.py pins each
behaviour relied on).

The metrics archive (:mod:`plant_store.metrics.archive`) writes a file that the client's
``MultiProcessCollector`` reads as one more worker's: the client has no public writer for
it. Relied on, as read in prometheus_client 0.26.0:

- ``prometheus_client.mmap_dict.MmapedDict(path)``, its ``write_value(key, value,
  timestamp)`` and ``close()``: the format of a worker's ``<kind>_<pid>.db``;
- ``prometheus_client.mmap_dict.mmap_key(metric_name, name, labelnames, labelvalues,
  help_text)``: the key a sample is kept under there;
- and, public but undocumented, ``MultiProcessCollector.merge(paths, accumulate=False)``:
  the files' samples summed, histogram buckets raw (not cumulative), as a worker writes them;
- a histogram child's ``_upper_bounds`` (ending in +Inf), ``_buckets`` (a counter value
  per bucket, not cumulative) and ``_sum``: a batch of requests' latencies counted in one
  addition per bucket hit (:func:`observe_all`), 0.8 us a request less than ``observe``
  each;
- ``prometheus_client.values.ValueClass``, ``MutexValue`` and ``MultiProcessValue()``: the
  client chooses how every metric made from then on keeps its values when it is first
  imported, by ``PROMETHEUS_MULTIPROC_DIR``; a worker forked from a master that imported
  it before naming the directory switches to files itself (:func:`count_in_files`).
"""

import bisect
import math
import os
from collections.abc import Iterable
from typing import Any

from prometheus_client import values
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector


def merge(paths: Iterable[str], into: str) -> None:
    """Write the sum of the multiprocess files ``paths`` into ``into``, a new file, keyed as
    the client keys them in a worker's file."""
    metrics = MultiProcessCollector.merge(list(paths), accumulate=False)
    archive = MmapedDict(into)
    try:
        for metric in metrics:
            for sample in metric.samples:
                key = mmap_key(metric.name, sample.name, list(sample.labels),
                               list(sample.labels.values()), metric.documentation)
                archive.write_value(key, sample.value, 0.0)
    finally:
        archive.close()


def observe_all(histogram: Any, amounts: list[float]) -> None:
    """``histogram.observe(amount)`` for each of ``amounts``, in one addition per bucket hit
    and one to the sum: the bucket of an amount is the first whose upper bound is at least
    it (``observe``'s ``amount <= bound``), so with the amounts sorted a bucket's are a run
    of them, found by one bisection per bucket (C loops: 37 ns an amount in batches of 256,
    against 103 for a ``bisect_left`` per amount). Through the client's attributes of a
    histogram child (``_upper_bounds``, ``_buckets``, ``_sum``), read in prometheus_client
    0.26.0; without them, each amount is observed. tests/unit/metrics/
    test_prometheus_adapter.py and tests/unit/test_library_pins.py check that both ways
    give the same exposition."""
    try:
        bounds, buckets, total = histogram._upper_bounds, histogram._buckets, histogram._sum
    except AttributeError:  # another client's layout: the public way
        for amount in amounts:
            histogram.observe(amount)
        return
    summed = math.fsum(amounts)
    hits: dict[int, int] = {}  # bucket -> amounts in it
    if summed == summed:  # no NaN among them: sorted, each bucket's are a run of them
        ordered, below = sorted(amounts), 0
        for at, bound in enumerate(bounds):
            upto = bisect.bisect_right(ordered, bound, below)  # the amounts <= bound
            if upto > below:
                hits[at] = upto - below
                below = upto
    else:  # a NaN, which observe puts in no bucket (the sum is NaN either way)
        for amount in amounts:
            at = bisect.bisect_left(bounds, amount)
            if amount <= bounds[at]:
                hits[at] = hits.get(at, 0) + 1
    total.inc(summed)
    for at, count in hits.items():
        buckets[at].inc(count)


def count_in_files() -> None:
    """From here on, metrics made in this process keep their values in files of its own in
    ``PROMETHEUS_MULTIPROC_DIR`` (the client's multiprocess mode), as they would had the
    variable been set when the client was first imported; a process already in that mode
    stays as it is. The variable must be set."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        raise ValueError("PROMETHEUS_MULTIPROC_DIR is not set")
    if values.ValueClass is values.MutexValue:
        values.ValueClass = values.MultiProcessValue()
