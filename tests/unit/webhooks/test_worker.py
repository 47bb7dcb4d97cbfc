"""The new-plant webhook: deliveries signed the Standard Webhooks way (checked with the
official standardwebhooks library, as a receiver would) from a durable outbox, retried
with back-off, dead letters, restart and kill -9 survival, and a clean stop; against a
real receiver."""

import base64
import hashlib
import hmac

import pytest
from standardwebhooks import Webhook

from plant_store.config import Config
from plant_store.stores import MemoryStore, StoreUnavailable
from plant_store.stores.records import Plant
from plant_store.webhooks import worker as webhooks
from support.faulty_stores import FaultyStore
from support.receiver import SECRET


def test_the_signature_is_the_specifications():
    """The spec's own formula, by hand (HMAC-SHA256 of "{id}.{timestamp}.{body}" keyed
    with the base64 after whsec_), and the published Standard Webhooks test vector."""
    body = '{"id":1,"name":"Fern \U0001f331"}'.encode()
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    mac = hmac.new(key, b"d1.1700000000." + body, hashlib.sha256).digest()
    assert webhooks.signed(Webhook(SECRET), "d1", body, 1700000000) == {
        "webhook-id": "d1", "webhook-timestamp": "1700000000",
        "webhook-signature": "v1," + base64.b64encode(mac).decode()}
    vector = webhooks.signed(Webhook("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
                             "msg_p5jXN8AQM9LWM0D4loKWxJek", b'{"test": 2432232314}', 1614265330)
    assert vector["webhook-signature"] == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_a_new_secret_is_a_fresh_whsec_secret():
    made = {webhooks.new_secret() for _ in range(20)}
    assert len(made) == 20
    for secret in made:
        assert Config(webhook_secret=secret).webhook_secret == secret
        assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32


def test_backoff():
    for attempts, ceiling in ((1, 1.0), (2, 2.0), (5, 16.0), (40, webhooks.MAX_BACKOFF)):
        delays = [webhooks.backoff(1.0, attempts) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 100  # jitter: retries of many deliveries spread out


def test_a_replay_owes_nothing_and_each_subscriber_gets_its_own_delivery():
    store = MemoryStore()
    urls = ("http://127.0.0.1:1/a", "http://127.0.0.1:1/b")
    store.create(Plant(1, "Fern"), urls)
    store.create(Plant(1, "Fern"), urls)
    owed = store.deliveries()
    assert [d.url for d in owed] == list(urls)
    assert len({d.id for d in owed}) == 2 and {d.body for d in owed} == {b'{"id":1,"name":"Fern"}'}


def test_an_unacknowledged_create_is_not_announced(tmp_path):
    with FaultyStore(str(tmp_path)) as store:
        store.fail_fsync = True
        with pytest.raises(StoreUnavailable):
            store.create(Plant(1, "never"), ("http://127.0.0.1:1/hook",))
        store.fail_fsync = False
        assert store.deliveries() == [] and len(store) == 0


