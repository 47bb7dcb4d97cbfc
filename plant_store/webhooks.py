"""The new-plant webhook: a worker thread that sends what the store's outbox owes.

Deliveries leave the client's request path entirely: a create only writes them into the
outbox (in the same record as the plant); this worker POSTs each one, signed, and records
the outcome in the store. Failures are retried with exponential back-off and jitter; after
``webhook_max_attempts`` a delivery is kept as a dead letter until an operator retries it.
Delivery is at least once: a crash between a send and its record sends it again, and
receivers dedupe on the delivery id.
"""

import hashlib
import hmac
import http.client
import logging
import os
import random
import threading
import time
from urllib.parse import urlsplit

import orjson

from plant_store import __version__
from plant_store.config import Config
from plant_store.stores import Store, StoreUnavailable
from plant_store.stores.outbox import Delivery

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Plant-Store-Signature"
DELIVERY_HEADER = "X-Plant-Store-Delivery"
RETRY_FILE = "webhooks-retry.json"  # dead letters an operator asked to resend
MAX_BACKOFF = 3600.0
IDLE = 5.0  # seconds between looks at the retry file when nothing is due


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def backoff(first: float, attempts: int) -> float:
    """Seconds before the next try after ``attempts`` failures: doubling, with jitter."""
    delay = min(MAX_BACKOFF, first * 2 ** (attempts - 1))
    return random.uniform(delay / 2, delay)


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> str | None:
    """POST ``body``; None when the subscriber answered 2xx, else what went wrong."""
    parts = urlsplit(url)
    connection_class = (http.client.HTTPSConnection if parts.scheme == "https"
                        else http.client.HTTPConnection)
    connection = connection_class(parts.hostname, parts.port, timeout=timeout)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request("POST", target, body, headers)
        response = connection.getresponse()
        response.read(65536)
        if 200 <= response.status < 300:
            return None
        return f"HTTP {response.status} {response.reason}".strip()
    except (OSError, http.client.HTTPException) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        connection.close()


def request_retry(data_dir: str, delivery_ids: list[str]) -> None:
    """Ask a running server to resend these dead letters (it looks every few seconds)."""
    path = os.path.join(data_dir, RETRY_FILE)
    wanted = set(delivery_ids)
    try:
        with open(path, "rb") as fh:
            wanted.update(orjson.loads(fh.read()))
    except FileNotFoundError:
        pass
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(orjson.dumps(sorted(wanted)))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def retry(store: Store, delivery_ids: list[str] | None = None) -> list[str]:
    """Move dead letters (all, or those named) back to the outbox; return their ids."""
    dead = [d.id for d in store.deliveries(dead=True)]
    wanted = None if delivery_ids is None else set(delivery_ids)
    chosen = dead if wanted is None else [i for i in dead if i in wanted]
    for delivery_id in chosen:
        store.settle(delivery_id, "retry")
    return chosen


class WebhookWorker:
    def __init__(self, store: Store, config: Config) -> None:
        self._store = store
        self._secret = config.webhook_secret
        self._max_attempts = config.webhook_max_attempts
        self._backoff = config.webhook_backoff
        self._timeout = config.webhook_timeout
        self._retry_file = os.path.join(config.data_dir, RETRY_FILE)
        self._due: dict[str, float] = {}  # delivery id -> monotonic time of its next try
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

    def stop(self) -> None:
        """Finish the delivery in flight (bounded by the timeout), then return."""
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()

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
        """Send every delivery that is due; return the seconds until the next one is."""
        self._take_retry_requests()
        wait = IDLE
        for delivery in self._store.deliveries():
            if self._stopping.is_set():
                break
            due = self._due.get(delivery.id, 0.0) - time.monotonic()
            wait = min(wait, due if due > 0 else self._send(delivery))
        return max(wait, 0.0)

    def _send(self, delivery: Delivery) -> float:
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(self._secret, delivery.body),
            DELIVERY_HEADER: delivery.id,
            "User-Agent": f"plant-store/{__version__}",
        }
        error = post(delivery.url, delivery.body, headers, self._timeout)
        attempts = delivery.attempts + 1
        if error is None:
            self._store.settle(delivery.id, "delivered")
            self._due.pop(delivery.id, None)
            return IDLE
        if attempts >= self._max_attempts:
            self._store.settle(delivery.id, "dead", error)
            self._due.pop(delivery.id, None)
            log.error("webhook delivery %s to %s failed %d times (%s); kept as a dead letter",
                      delivery.id, delivery.url, attempts, error)
            return IDLE
        self._store.settle(delivery.id, "failed", error)
        delay = backoff(self._backoff, attempts)
        self._due[delivery.id] = time.monotonic() + delay
        log.warning("webhook delivery %s to %s failed (%s); attempt %d of %d in %.1f s",
                    delivery.id, delivery.url, error, attempts + 1, self._max_attempts, delay)
        return delay

    def _take_retry_requests(self) -> None:
        try:
            with open(self._retry_file, "rb") as fh:
                wanted = orjson.loads(fh.read())
        except FileNotFoundError:
            return
        except (OSError, orjson.JSONDecodeError) as exc:
            log.error("cannot read %s: %s", self._retry_file, exc)
            return
        resent = retry(self._store, [str(i) for i in wanted] if isinstance(wanted, list) else [])
        os.unlink(self._retry_file)
        log.info("dead letters back in the outbox on request: %s", " ".join(resent) or "none")


def start(config: Config, store: Store) -> WebhookWorker | None:
    """A running worker when subscribers are configured."""
    if not config.webhook_urls:
        return None
    return WebhookWorker(store, config).start()
