"""The one way data climbs the layers (plant_store.events): the interface names every event,
the fan-out tells each subscriber what it hears and binds a lone subscriber's own method, so
the hot path costs one call, and the service's parts hear what they should."""

import webtest

from plant_store import events
from plant_store.app import create_app
from plant_store.config import Config
from plant_store.events import Events, Fanout
from plant_store.metrics import Metrics, NoMetrics
from plant_store.stores import MemoryStore
from plant_store.tokens import StaticTokens
from plant_store.webhooks import NoWebhooks
from plant_store.webhooks.worker import new_secret


class Heard(Events):
    def __init__(self):
        self.heard = []

    def created(self):
        self.heard.append("created")

    def refused(self, reason):
        self.heard.append(("refused", reason))


class Attempts(Events):
    def __init__(self):
        self.outcomes = []

    def attempted(self, outcome):
        self.outcomes.append(outcome)

    def refused(self, reason):
        self.outcomes.append(("refused", reason))


def test_the_names_are_every_event_of_the_interface():
    methods = {name for name in vars(Events) if not name.startswith("_")}
    assert set(events.NAMES) == methods


def test_an_event_nobody_hears_does_nothing():
    for name in events.NAMES:
        assert getattr(Fanout(Events(), NoMetrics(), NoWebhooks()), name).__func__ is getattr(
            Events, name)


def test_a_lone_subscriber_is_called_directly_and_a_shared_event_reaches_each():
    one, two = Heard(), Attempts()
    fanout = Fanout(one, two)
    assert fanout.created == one.created  # bound once: no call in between
    assert fanout.attempted == two.attempted
    fanout.created()
    fanout.attempted("dead")
    fanout.refused("missing")
    fanout.wrote(0.1)  # nobody's
    assert one.heard == ["created", ("refused", "missing")]
    assert two.outcomes == ["dead", ("refused", "missing")]


def test_a_fanout_among_the_subscribers_passes_on_what_it_hears():
    one, two = Heard(), Attempts()
    fanout = Fanout(Fanout(one), Fanout(Events(), two))
    assert fanout.attempted == two.attempted
    fanout.refused("invalid")
    assert one.heard == [("refused", "invalid")] and two.outcomes == [("refused", "invalid")]


def test_the_app_tells_its_events_to_the_metrics_and_a_create_that_owes_to_the_worker():
    class Worker(Events):  # the worker's side of create_app: it hears "created"
        def __init__(self):
            self.woken = 0

        def created(self):
            self.woken += 1

        def stop(self):
            pass

    store, worker = MemoryStore(), Worker()
    config = Config(store="memory", webhook_urls=("http://127.0.0.1:9/hook",),
                    webhook_secret=new_secret())
    metrics = Metrics(store)
    client = webtest.TestApp(create_app(config, store=store, tokens=StaticTokens({"t": "me"}),
                                        metrics=metrics, webhooks=worker))
    client.post_json("/plants", {"id": 1, "name": "fern"}, status=401)
    headers = {"Authorization": "Bearer t"}
    client.post_json("/plants", {"id": 1, "name": "fern"}, headers=headers)
    client.post_json("/plants", {"id": 1, "name": "fern"}, headers=headers)  # a replay
    assert worker.woken == 1
    text = metrics.exposition().decode()
    assert 'plant_store_tokens_refused_total{reason="missing"} 1.0' in text
    assert ('plant_store_http_requests_total{method="POST",route="/plants",status="200"} 2.0'
            in text)
