"""The service assembled in one place: the store, the metrics, the webhook worker and the
app, opened in that order and closed in the reverse.

``plant-store serve`` (:mod:`plant_store.serving.server`), the app each process of a
pre-fork server builds (:mod:`plant_store.serving.lazy_app`) and a host application
(``docs/examples/host_app.py``) all open a :class:`Service`; none repeats the wiring.

Invariants: when ``Service(...)`` returns, everything is open; when it raises, whatever it
had opened is closed again (a leaked store would hold the data directory's lock until the
process ends). :meth:`Service.close` stops the webhook worker after the last request (what
the requests owe is in the outbox by then), then closes the store if the service opened
it; a second call does nothing.
"""

from collections.abc import Callable, Iterable
from typing import TextIO

from plant_store import metrics, webhooks
from plant_store.app import create_app
from plant_store.config import Config
from plant_store.http.auth import Tokens
from plant_store.stores import Store, open_store
from plant_store.tokens import TokenFile


class Service:
    """The store, metrics, webhook worker and app of one process."""

    def __init__(self, config: Config, *, store: Store | None = None,
                 tokens: Tokens | None = None, lock_timeout: float | None = None,
                 metrics_dir: str | None = None, log_stream: TextIO | None = None) -> None:
        """``store``: one the caller owns and closes (else the configured one is opened,
        waiting ``lock_timeout`` for its owner); ``tokens``: else the configured token
        file; ``metrics_dir``: where each process of a pre-fork server keeps its counts
        (:mod:`plant_store.metrics`); ``log_stream``: the access lines' (else logging's)."""
        self.config = config
        self.tokens: Tokens = tokens if tokens is not None else TokenFile(config.token_file)
        if isinstance(self.tokens, TokenFile):
            self.tokens.entries()  # a file that cannot be read: refused at start, in one line
        self._owns_store = store is None
        # The store's events (its writes) go to the metrics' timings, given when it is
        # opened, before the metrics, which read it (a store passed in reports to what its
        # opener gave it); the layers above tell the metrics and the worker (create_app).
        timings = metrics.timings_for(config)
        self.store = store if store is not None else open_store(
            config, lock_timeout=lock_timeout, events=timings)
        self.webhooks: webhooks.WebhookWorker | webhooks.NoWebhooks = webhooks.NoWebhooks()
        try:
            self.metrics = metrics.for_config(config, self.store, metrics_dir, timings)
            self.webhooks = webhooks.start(config, self.store, self.metrics)
            self.app: Callable[..., Iterable[bytes]] = create_app(
                config, store=self.store, tokens=self.tokens, webhooks=self.webhooks,
                metrics=self.metrics, log_stream=log_stream)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Deliveries in flight end (bounded by ``webhook_timeout``), then the store lets
        go. Idempotent."""
        worker, self.webhooks = self.webhooks, webhooks.NoWebhooks()
        worker.stop()
        if self._owns_store:
            self._owns_store = False
            self.store.close()

    def __enter__(self) -> "Service":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
