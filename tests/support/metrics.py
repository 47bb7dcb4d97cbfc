"""Scrapes of metrics, as {(sample name, sorted label items): value}: over HTTP, from a
multiprocess directory, or through the metrics archive; the files a worker leaves; and the
subdirectory a service counts in."""

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from plant_store.metrics import archive as metrics_archive

WORKERS = 60


def samples(text):
    """{(sample name, sorted label items): value} of a scrape."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(scraped, name, **labels):
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(request, token=None):
    status, headers, body = request("GET", "/metrics", token=token)
    assert status == 200, body
    assert headers["Content-Type"].startswith("text/plain; version=")
    return body.decode()


def scrape_directory(directory):
    """{(sample name, labels): value} of a scrape (families come in no set order)."""
    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry, str(directory))
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(generate_latest(registry).decode())
            for s in family.samples}


def scrape_archive(directory):
    """{(sample name, labels): value} of a scrape, through the metrics archive."""
    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry, str(directory))
    with metrics_archive.reading(str(directory)):
        text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def own_subdirectory(directory):
    """The subdirectory a running service made for its counts in ``directory`` (the one the
    user named in PROMETHEUS_MULTIPROC_DIR): the only one named as the service's."""
    made = [path for path in directory.iterdir() if path.name.startswith("plant-store-metrics-")]
    assert len(made) == 1, sorted(path.name for path in directory.iterdir())
    return made[0]


def write_worker(directory, pid):
    """The files a worker leaves: a counter over two label sets, a histogram's buckets and
    sum (keys as the client writes them)."""
    counter = MmapedDict(str(directory / f"counter_{pid}.db"))
    for status in ("200", "503"):
        counter.write_value(mmap_key("requests", "requests_total", ["status"], [status], "h"),
                            pid % 7 + 1, 0.0)
    counter.close()
    histogram = MmapedDict(str(directory / f"histogram_{pid}.db"))
    for le in ("0.1", "1.0", "+Inf"):
        histogram.write_value(mmap_key("seconds", "seconds_bucket", ["le"], [le], "h"),
                              pid % 3, 0.0)
    histogram.write_value(mmap_key("seconds", "seconds_sum", [], [], "h"), pid / 10, 0.0)
    histogram.close()
