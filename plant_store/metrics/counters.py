"""Prometheus metrics, with the official client: what the service counts, and the text a
scrape of ``GET /metrics`` reads.

:class:`Metrics` hears the service's :class:`~plant_store.events.Events`: each request the
access log timed and the lines it had to drop, the token check's refusals, the plant
resources' 503s and their causes, the webhook worker's attempts; the store's durable
writes and compactions come through :class:`StoreTimings`, its events, given to it when it
opens (before the metrics, which read the store). The requests come in batches
(``requests``), off the request's thread as a rule: the access log records each request as
it is answered and hands the records on when it drains them
(:mod:`plant_store.http.access_log` says when, and its invariants); a scrape drains first,
through the drains the app handed over when it was built (:meth:`Metrics.drain_before_scrape`),
so it counts every request answered before it. In one process a batch costs one label
lookup per distinct (route, method, status), one ``inc`` per label set, and per histogram
one addition to its sum and one to each bucket hit; with several processes
(:attr:`Metrics.in_files`), each request is handed on as it is answered, and costs a dict
lookup of its label set's children and two additions to the files. Label values are
looked up once per (route, method, status), not per request.

Labels stay bounded: the route is the template (``/plants/{plant_id}``), or the template
the router would have chosen for a request refused before routing (a 401), or ``unmatched``;
a method outside HTTP's own is ``OTHER``.

Several processes (``multiprocess_dir``, a pre-fork server's workers): each counts in files
of its own there (the client's multiprocess mode, chosen by ``PROMETHEUS_MULTIPROC_DIR``
when the client is first imported) and a scrape, whichever worker serves it, sums them all,
those of workers that have ended included (merged into one archive,
:mod:`plant_store.metrics.archive`), so counters never go back. The two gauges
(deliveries owed, dead letters) are not kept in those files: they are read from the store
at each scrape, which the PostgreSQL store's processes share, so no worker's copy can go
stale when it ends. See :mod:`plant_store.serving.gunicorn_hooks` for making the directory.
"""

import inspect
import weakref
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any

import falcon
import falcon.routing
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from plant_store.config import Config
from plant_store.events import Answered, Events
from plant_store.http.operational import ROUTES
from plant_store.metrics import archive, prometheus_adapter
from plant_store.stores import Store, StoreUnavailable
from plant_store.stores.base import CAUSES

# An Answered record's fields (plant_store.events.Answered)
_ROUTE, _METHOD, _STATUS, _SECONDS = itemgetter(8), itemgetter(2), itemgetter(5), itemgetter(6)
disable_created_metrics()  # the *_created series: a second time series per series, unused

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE",
                     "CONNECT"})
UNMATCHED = "unmatched"
REFUSALS = ("missing", "scheme", "invalid")  # no header, not Bearer, an unknown token
OUTCOMES = ("delivered", "failed", "dead")  # dead: the last attempt allowed failed
OPERATIONS = ("create", "delete", "get", "list", "update")
# Requests take a millisecond or so here; a slow fsync or database tens of them.
LATENCY = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
COMPACTION = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300)


def timings_for(config: Config) -> Events:
    """The events a store is opened with (before the metrics that count for it, which
    read the store): ones that time its writes, or, metrics off, ones nobody hears."""
    return Events() if config.metrics == "off" else StoreTimings()


def for_config(config: Config, store: Store, multiprocess_dir: str | None = None,
               timings: Events | None = None) -> "Metrics | NoMetrics":
    """The metrics of an app serving ``store`` (opened with ``timings``, from
    :func:`timings_for`); ones that count nothing when the setting turns them off."""
    if config.metrics == "off":
        return NoMetrics()
    return Metrics(store, multiprocess_dir,
                   timings if isinstance(timings, StoreTimings) else None, config.url_prefix)


class StoreTimings(Events):
    """A store's events, its writes and compactions, as two histograms: given to the store
    when it is opened (nothing is set on it afterwards); :class:`Metrics` exposes them."""

    def __init__(self) -> None:
        self.writes = Histogram(
            "plant_store_store_write_duration_seconds", "Durable writes: each JSON-file "
            "group commit (its fsync, however many requests share it), or each PostgreSQL "
            "write statement's round trip.", buckets=LATENCY, registry=None)
        self.compactions = Histogram(
            "plant_store_compaction_duration_seconds", "Compactions of the JSON file and "
            "their duration.", buckets=COMPACTION, registry=None)

    def wrote(self, seconds: float) -> None:
        self.writes.observe(seconds)

    def compacted(self, seconds: float) -> None:
        self.compactions.observe(seconds)


class NoMetrics(Events):
    """Metrics off (``metrics = off``): hears no event, counts nothing, serves no
    ``/metrics``; what the service and the servers ask of the metrics answers as
    :class:`Metrics` would, with nothing."""

    in_files = False  # nothing is counted, in files or elsewhere

    def read_at_scrape(self, collector: Any) -> None:
        """Nothing is scraped."""


class Metrics(Events):
    """The service's Prometheus metrics: requests, refusals, store writes and 503s, webhook
    attempts and the outbox, for one process or every worker of a pre-fork server."""

    content_type = CONTENT_TYPE_LATEST  # of the exposition

    def __init__(self, store: Store, multiprocess_dir: str | None = None,
                 timings: "StoreTimings | None" = None, url_prefix: str = "") -> None:
        """``timings``: what ``store`` was opened with as its observer (its writes and
        compactions, counted here too); a store opened without them reports to none.
        ``url_prefix``: the setting, taken off the paths of requests the server refused."""
        self._store = store
        self._url_prefix = url_prefix
        self.timings = timings if timings is not None else StoreTimings()
        self._multiprocess_dir = multiprocess_dir
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self._requests = Counter(
            "plant_store_http_requests", "Requests answered, by route template, method "
            "and status.", ("route", "method", "status"), registry=registry)
        self._latency = Histogram(
            "plant_store_http_request_duration_seconds", "Time from a request's arrival at "
            "the app to its answer, by route template and method.", ("route", "method"),
            buckets=LATENCY, registry=registry)
        self._unavailable = Counter(
            "plant_store_store_unavailable", "Requests answered 503 because the store "
            "refused, by operation and cause.", ("operation", "cause"), registry=registry)
        self._attempts = Counter(
            "plant_store_webhook_attempts", "Webhook delivery attempts, by outcome "
            "(dead: the last attempt allowed failed).", ("outcome",), registry=registry)
        self._refused = Counter(
            "plant_store_tokens_refused", "Requests refused 401, by reason: no "
            "Authorization header, another scheme, or a token that is not valid.",
            ("reason",), registry=registry)
        self._dropped = Counter(
            "plant_store_access_lines_dropped", "Access lines dropped because their "
            "destination (stderr) did not take them in time: a log reader that stalls costs "
            "lines, not memory or a hung server.", registry=registry)
        registry.register(self.timings.writes)
        registry.register(self.timings.compactions)
        for operation in OPERATIONS:  # every series from zero, so rates see the first one
            for cause in CAUSES:
                self._unavailable.labels(operation, cause)
        for outcome in OUTCOMES:
            self._attempts.labels(outcome)
        for reason in REFUSALS:
            self._refused.labels(reason)
        self._outbox = _OutboxGauges(store)
        registry.register(self._outbox)
        self._outbox_registry = CollectorRegistry(auto_describe=False)  # several processes'
        self._outbox_registry.register(self._outbox)
        self._children: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        # Several processes: a scrape, by whichever worker, reads the files, so each count
        # must reach them as its request is answered (the access log then hands each on).
        self.in_files = multiprocess_dir is not None
        self._drains: list[Callable[[], Callable[[], None] | None]] = []

    def drain_before_scrape(self, drain: Callable[[], None]) -> None:
        """Call ``drain`` at each scrape, before counting: what hands on the requests
        answered but not yet told (an access log's :meth:`drain`, wired when the app is
        built); held weakly when it is a bound method, so a dropped app is not kept."""
        self._drains.append(weakref.WeakMethod(drain) if inspect.ismethod(drain)
                            else (lambda: drain))

    def requests(self, answered: list[Answered]) -> None:
        """Count requests answered (:data:`~plant_store.events.Answered` records): in one
        process by label set, a batch at once; with several, each as it comes, to the
        files."""
        if not answered:
            return
        children_for = self._children_for
        if self.in_files:
            for _, _, method, _, path, status, seconds, _, route in answered:
                counter, histogram = children_for(route, method, status, path)
                counter.inc()
                histogram.observe(seconds)
            return
        # The usual batch: one route and method, so one histogram; checked and counted by
        # columns, in C (a tuple of labels per request costs more than the rest).
        routes, methods = list(map(_ROUTE, answered)), list(map(_METHOD, answered))
        route, method, size = routes[0], methods[0], len(answered)
        if route is not None and routes.count(route) == size and methods.count(method) == size:
            statuses = list(map(_STATUS, answered))
            for status in set(statuses):
                counter, histogram = children_for(route, method, status, "")
                counter.inc(statuses.count(status))
            prometheus_adapter.observe_all(histogram, list(map(_SECONDS, answered)))
            return
        seen: dict[tuple[Any, ...], list[float]] = {}  # label set (and path) -> seconds
        for _, _, method, _, path, status, seconds, _, route in answered:
            key = (route, method, status, path if route is None else "")
            times = seen.get(key)
            if times is None:
                seen[key] = [seconds]
            else:
                times.append(seconds)
        observed: dict[Any, list[float]] = {}  # histogram -> its requests' seconds
        for key, times in seen.items():
            counter, histogram = children_for(*key)
            counter.inc(len(times))
            observed.setdefault(histogram, []).extend(times)
        for histogram, times in observed.items():
            prometheus_adapter.observe_all(histogram, times)

    def _children_for(self, route: str | None, method: str, status: object,
                      path: str) -> tuple[Any, ...]:
        """The (requests counter, latency histogram) children of a request's label set:
        looked up once per (route, method, status), not per request."""
        if method not in METHODS:
            method = "OTHER"
        key = (route, method, status)
        children = self._children.get(key)
        if children is None:
            children = self._children_of(route, path, method, status)
        return children

    def _children_of(self, route: str | None, path: str, method: str,
                     status: object) -> tuple[Any, ...]:
        cached = route is not None  # routes are few: bounded; unrouted paths are not
        if route is None:  # refused before routing (401), or no route (404)
            route = self._route_of(path)
        children = (self._requests.labels(route, method,
                                          str(falcon.http_status_to_code(status))),
                    self._latency.labels(route, method))
        if cached:
            self._children[(route, method, status)] = children
        return children

    def _route_of(self, path: str) -> str:
        """The route template the router would choose for ``path``, or ``unmatched``."""
        found = _ROUTER.find(path) if path.startswith("/") else None
        return (found[3] or UNMATCHED) if found else UNMATCHED  # a match has its template

    def refused_by_server(self, method: str, path: str, status: int) -> None:
        """A request the server answered itself (waitress's 400, 413, 431, 501; granian's
        413), which the app never saw: counted under the route its path names, if any, as
        the app would name it (under ``url_prefix``, without it: the hostile pass on issue
        52 found ``POST /api/plants`` counted as ``unmatched``); not timed."""
        prefix = self._url_prefix
        if prefix and (path == prefix or path.startswith(prefix + "/")):
            path = path[len(prefix):] or "/"
        self._children_for(None, method, status, path)[0].inc()

    def refused(self, reason: str) -> None:
        self._refused.labels(reason).inc()

    def unavailable(self, operation: str, cause: str) -> None:
        self._unavailable.labels(operation, cause).inc()

    def attempted(self, outcome: str) -> None:
        self._attempts.labels(outcome).inc()

    def dropped(self, lines: int) -> None:
        self._dropped.inc(lines)

    def read_at_scrape(self, collector: Any) -> None:
        """A collector of the server's (a worker's restarts), read at each scrape."""
        self.registry.register(collector)
        self._outbox_registry.register(collector)  # several processes': not in the files

    def exposition(self) -> bytes:
        """The Prometheus text of a scrape: this process's counts, or every worker's."""
        for held in list(self._drains):
            drain = held()
            if drain is None:  # its app was dropped
                self._drains.remove(held)
            else:
                drain()
        if self._multiprocess_dir is None:
            return generate_latest(self.registry)
        registry = CollectorRegistry(auto_describe=False)
        MultiProcessCollector(registry, self._multiprocess_dir)
        with archive.reading(self._multiprocess_dir):  # not the outbox's query
            counted = generate_latest(registry)
        return counted + generate_latest(self._outbox_registry)


class _OutboxGauges:
    """The webhook outbox's gauges, read from the store at each scrape; none when the store
    cannot be read then (the scrape still answers, with the counters)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def describe(self) -> list[Any]:
        return []  # collected at scrape time only

    def collect(self) -> Iterator[Metric]:
        try:
            owed, dead = self._store.outbox_counts()
        except StoreUnavailable:
            return
        yield GaugeMetricFamily("plant_store_webhook_deliveries_owed",
                                "Webhook deliveries owed (not yet delivered, not dead).", owed)
        yield GaugeMetricFamily("plant_store_webhook_deliveries_dead",
                                "Webhook deliveries kept as dead letters.", dead)


def _router() -> falcon.routing.CompiledRouter:
    """The app's routes (http.operational), compiled here, to name the route of a request
    refused before routing (a 401's) as the app's router would."""
    router = falcon.routing.CompiledRouter()
    for template in ROUTES:
        router.add_route(template, _Named())
    return router


class _Named:
    """A resource that answers nothing: the router only names the template."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Never called."""


_ROUTER = _router()
