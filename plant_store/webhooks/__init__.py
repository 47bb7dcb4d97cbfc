"""The new-plant webhook: the worker that sends what the store's outbox owes, one bounded POST
per attempt, and the hand-over by which ``plant-store webhooks retry`` asks a running server
to send dead letters again."""

from plant_store.webhooks.worker import NoWebhooks, WebhookWorker, start

__all__ = ["NoWebhooks", "WebhookWorker", "start"]
