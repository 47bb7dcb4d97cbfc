"""The new-plant webhook: a worker that sends what the store's outbox owes.

Deliveries leave the client's request path entirely: a create only writes them into the
outbox (in the same record as the plant); this worker POSTs each one, signed the Standard
Webhooks way (standardwebhooks.com), each within ``webhook_timeout`` in all, and records
the outcome in the store. Failures are retried with exponential back-off and jitter; after
``webhook_max_attempts`` a delivery is kept as a dead letter until an operator retries it.
Delivery is at least once: a crash between a send and its record sends it again, and
receivers dedupe on the delivery id (``webhook-id``).
"""

import base64
import collections
import contextlib
import logging
import random
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from standardwebhooks import Webhook

from plant_store import __version__
from plant_store.config import Config
from plant_store.events import Events
from plant_store.stores import Store, StoreUnavailable
from plant_store.stores.records import Delivery
from plant_store.util.concurrency import Watchdog
from plant_store.util.files import first_this_start
from plant_store.util.loopback import clear_text_urls
from plant_store.util.words import counted
from plant_store.webhooks import retry_requests
from plant_store.webhooks.bounded_post import post

log = logging.getLogger("plant_store.webhooks")  # the name users filter on

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32  # the spec asks for 24 to 64 random bytes
MAX_BACKOFF = 3600.0
IDLE = 5.0  # seconds between looks at retry requests when nothing is due


def new_secret() -> str:
    """A fresh ``whsec_`` secret for ``webhook_secret`` and the subscribers."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def signed(signer: Webhook, delivery_id: str, body: bytes, timestamp: int) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt: the delivery's id (the same on every
    retry), the attempt's time, and their HMAC with the body, so that a receiver can refuse
    a captured request replayed later or altered. ``body`` is orjson's, always UTF-8."""
    when = datetime.fromtimestamp(timestamp, timezone.utc)  # sign() assumes UTC
    return {"webhook-id": delivery_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": signer.sign(delivery_id, when, body.decode())}


def backoff(first: float, attempts: int) -> float:
    """Seconds before the next try after ``attempts`` failures: doubling, with jitter."""
    delay = min(MAX_BACKOFF, first * 2 ** (attempts - 1))
    return random.uniform(delay / 2, delay)


def retry(store: Store, delivery_ids: list[str] | None = None) -> list[str]:
    """Move dead letters (all, or those named that still are) back to the outbox; return
    their ids. Named ids no longer dead (another retry moved them meanwhile) are skipped,
    not refused: a hand-over request must not fail for good (see retry_requests)."""
    if delivery_ids is not None:
        dead = {d.id for d in store.deliveries(dead=True)}
        delivery_ids = [i for i in delivery_ids if i in dead]
        if not delivery_ids:
            return []
    return store.retry_dead(delivery_ids)


class WebhookWorker(Events):
    """Sends what the outbox owes, woken by the one event it hears (``created``): a
    dispatcher thread decides which URLs have deliveries due, and each URL's deliveries go
    out in that URL's lane, one at a time and in order, the lanes in parallel, so a slow or
    dead subscriber delays only its own deliveries.

    Invariants:

    - A URL has at most one lane in this worker (``_busy``), and, on a store several
      processes share, in all of them: a lane holds the store's lease on its URL (hold_lane),
      renewed with the count of each attempt before it is made (begin_attempt), and stops
      when it cannot.
    - A lane sends its URL's deliveries oldest first and stops at the first failure: the
      URL then waits out its back-off (``_due``, and on a shared store the delivery's own
      ``due``) and that delivery is tried again before any later one. So one URL's
      deliveries arrive in order, at most one in flight, each tried at most
      ``webhook_max_attempts`` times (on a shared store each attempt is counted in the
      store before it is made, under the lane's lease: begin_attempt).
    - The dispatcher reads only which URLs are owed something (lanes), never the backlog,
      and a lane reads at most LANE_BATCH deliveries at a time, so neither a create nor a
      pass costs more with thousands of deliveries owed.
    - A lane records each outcome in the store before its next send, and frees its URL
      (then wakes the dispatcher) when it ends. It ends after LANE_SLICE seconds too (past
      the send in flight), so lanes share the threads in turn: a URL that only the outbox
      still names, with a long backlog to a slow subscriber, cannot keep a configured
      one's lane from a thread.
    """

    LANE_BATCH = 100
    LANE_SLICE = 1.0  # seconds a lane keeps its thread while other lanes may wait for one

    def __init__(self, store: Store, config: Config, events: Events | None = None) -> None:
        """``events``: told each attempt's outcome (``attempted``: ``delivered``,
        ``failed`` or ``dead``), for the metrics."""
        self._store = store
        self._events = events if events is not None else Events()
        self._signer = Webhook(config.webhook_secret)  # config.py has validated it
        self._max_attempts = config.webhook_max_attempts
        self._backoff = config.webhook_backoff
        self._timeout = config.webhook_timeout
        # A lease outlives the send it covers (bounded by the timeout) and the outcome's
        # write; past it, another instance may take over a lane whose holder died (a slow
        # write of the outcome costs at worst one more send: at least once).
        self._lease = 2 * self._timeout + 1
        self._data_dir = config.data_dir
        self._ignored_requests: set[str] = set()  # requests that could not be removed
        self._lock = threading.Lock()  # the dispatcher's view against the lanes' updates
        self._due: dict[str, float] = {}  # URL -> monotonic time of its next try
        self._busy: set[str] = set()  # URLs whose lane runs here
        # A thread per configured subscriber, so none waits for another's lane (each held
        # at most webhook_timeout per send), and two for URLs that only the outbox still
        # names (the configuration changed since their creates); at most 32, as the
        # executor's own default, beyond which subscribers share threads.
        self._lanes = ThreadPoolExecutor(min(32, len(config.webhook_urls) + 2),
                                         thread_name_prefix="plant-store-webhook")
        self._deadlines = Watchdog("plant-store-webhook-deadlines")  # one thread for every send
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="plant-store-webhooks",
                                        daemon=True)

    def start(self) -> "WebhookWorker":
        self._thread.start()
        return self

    def wake(self) -> None:
        """A create was acknowledged: look at the outbox now rather than at the next timer."""
        self._wake.set()

    created = wake  # the event it hears

    def stop(self) -> None:
        """Start no more deliveries, let those in flight end (each within the timeout: the
        lanes run in parallel, so all of them together too), then return."""
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()
        self._lanes.shutdown(wait=True, cancel_futures=True)
        self._deadlines.close()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                delay = self.run_once()
            except StoreUnavailable as exc:
                log.error("webhook deliveries paused: %s", exc)
                delay = self._backoff
            except Exception:
                log.exception("webhook worker failed; trying again")
                delay = self._backoff
            self._wake.wait(delay)

    def run_once(self) -> float:
        """Start a lane for each idle URL with deliveries due; return the seconds until the
        next back-off ends (a lane that ends wakes the dispatcher sooner)."""
        self._take_retry_requests()
        urls = self._store.lanes()
        now = time.monotonic()
        with self._lock:
            # Every back-off here ends with a look, whether or not the store listed its URL
            # this time (a store shared by instances lists a URL only once it is due).
            backoffs = {url: due - now for url, due in self._due.items() if due > now}
            self._due = {url: now + wait for url, wait in backoffs.items()}
            starting = [u for u in urls if u not in backoffs and u not in self._busy]
            self._busy.update(starting)
        wait = min([IDLE, *backoffs.values()])
        for url in starting:
            try:
                self._lanes.submit(self._lane, url)
            except RuntimeError:  # the interpreter is exiting; its exit waits for the lanes
                self._stopping.set()
                break
        return max(wait, 0.0)

    def _lane(self, url: str) -> None:
        """Send ``url``'s due deliveries in order, one at a time, each outcome recorded,
        until none is due or one fails; then free the URL and wake the dispatcher."""
        started = time.monotonic()
        try:
            while not self._stopping.is_set() and self._store.hold_lane(url, self._lease):
                batch = self._store.lane(url, self.LANE_BATCH)
                for delivery in batch:
                    if self._stopping.is_set() or not self._send(delivery):
                        return
                    if time.monotonic() - started > self.LANE_SLICE:
                        return  # the dispatcher starts it again, behind lanes waiting
                if len(batch) < self.LANE_BATCH:
                    return
        except StoreUnavailable as exc:  # sent or not, it is owed: try again later
            log.error("webhook deliveries paused: %s", exc)
            self._set_due(url, self._backoff)
        except Exception:
            log.exception("webhook deliveries to %s failed; trying again", url)
            self._set_due(url, self._backoff)
        finally:
            with contextlib.suppress(StoreUnavailable):
                self._store.free_lane(url)
            with self._lock:
                self._busy.discard(url)
            self._wake.set()

    def _send(self, delivery: Delivery) -> bool:
        """One attempt, its outcome recorded; False when the lane must stop (it failed, or
        the lease on the URL is lost)."""
        attempts = self._store.begin_attempt(delivery, self._lease, self._max_attempts)
        if attempts is None:
            return False  # another instance holds the lane now (this one was too slow)
        if attempts > self._max_attempts:  # its last try's outcome was never recorded
            self._store.settle(delivery.id, "dead", "no outcome recorded for its last attempt")
            return True
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"plant-store/{__version__}",
            **signed(self._signer, delivery.id, delivery.body, int(time.time())),
        }
        error = post(delivery.url, delivery.body, headers, self._timeout, self._deadlines)
        if error is None:
            self._events.attempted("delivered")
            self._store.settle(delivery.id, "delivered")
            self._set_due(delivery.url, None)
            return True
        if attempts >= self._max_attempts:
            self._events.attempted("dead")
            self._store.settle(delivery.id, "dead", error)
            self._set_due(delivery.url, None)
            log.error("webhook delivery %s to %s failed %d times (%s); kept as a dead letter",
                      delivery.id, delivery.url, attempts, error)
            return True  # the next one may go: a dead letter holds nothing up
        self._events.attempted("failed")
        delay = backoff(self._backoff, attempts)
        self._store.settle(delivery.id, "failed", error, retry_in=delay)
        self._set_due(delivery.url, delay)
        log.warning("webhook delivery %s to %s failed (%s); attempt %d of %d in %.1f s",
                    delivery.id, delivery.url, error, attempts + 1, self._max_attempts, delay)
        return False

    def _set_due(self, url: str, delay: float | None) -> None:
        """The URL's next try in ``delay`` seconds; None: at once."""
        with self._lock:
            if delay is None:
                self._due.pop(url, None)
            else:
                self._due[url] = time.monotonic() + delay

    def _take_retry_requests(self) -> None:
        """Act on the dead-letter retries an operator asked for (see retry_requests)."""

        def act(ids: list[str]) -> None:
            resent = retry(self._store, ids)
            log.info("dead letters back in the outbox on request: %s",
                     " ".join(resent) or "none")

        retry_requests.take(self._data_dir, act, self._ignored_requests)


class NoWebhooks(Events):
    """Webhooks off (no ``webhook_secret``): a worker that sends nothing and hears no
    event, so that the app and the service hold a worker whatever the settings, with no
    None to check."""

    def wake(self) -> None:
        """Nothing to send."""

    def stop(self) -> None:
        """Nothing to stop."""


def start(config: Config, store: Store, events: Events | None = None
          ) -> WebhookWorker | NoWebhooks:
    """A running worker when deliveries can be signed (``webhook_secret``): it sends what
    creates owe to ``webhook_urls``, what the outbox still owes to URLs since removed from
    them, and dead letters an operator asks for again. Says at start what is owed to URLs
    no longer configured, and when nothing will send it. ``events``: told each attempt's
    outcome (the metrics)."""
    try:
        owed = store.deliveries()
    except StoreUnavailable:
        owed = []
    stale = collections.Counter(d.url for d in owed if d.url not in config.webhook_urls)
    if stale and not first_this_start("stale-deliveries"):  # a recycled worker: said at start
        stale.clear()
    for url, count in sorted(stale.items()):
        log.warning("%s owed to %s, which webhook_urls does not list: %s ('plant-store "
                    "webhooks list' shows them)",
                    counted(count, "webhook delivery", "webhook deliveries"), url,
                    "they are still sent there" if config.webhook_secret
                    else "nothing sends them until the server runs with webhook_secret")
    if plain := clear_text_urls(config.webhook_urls):
        log.warning("webhook_urls sends to %s over plain http beyond loopback: payloads and "
                    "their signatures travel in the clear (use https://; require_https "
                    "refuses these)", " and ".join(plain))
    if not config.webhook_secret:
        return NoWebhooks()
    return WebhookWorker(store, config, events).start()
