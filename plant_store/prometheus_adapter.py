"""Every reach into prometheus_client's private names (tests/unit/test_library_pins.py pins each
behaviour relied on).

The metrics archive (:mod:`plant_store.serving.metrics_archive`) writes a file that the client's
``MultiProcessCollector`` reads as one more worker's: the client has no public writer for
it. Relied on, as read in prometheus_client 0.26.0:

- ``prometheus_client.mmap_dict.MmapedDict(path)``, its ``write_value(key, value,
  timestamp)`` and ``close()``: the format of a worker's ``<kind>_<pid>.db``;
- ``prometheus_client.mmap_dict.mmap_key(metric_name, name, labelnames, labelvalues,
  help_text)``: the key a sample is kept under there;
- and, public but undocumented, ``MultiProcessCollector.merge(paths, accumulate=False)``:
  the files' samples summed, histogram buckets raw (not cumulative), as a worker writes them.
"""

from collections.abc import Iterable

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
