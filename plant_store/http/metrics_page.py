"""``GET /metrics``: the exposition the metrics make, served; one scrape at a time."""

from collections.abc import Callable

import falcon

from plant_store.util.concurrency import SingleFlight


class MetricsResource:
    """``GET /metrics``. Concurrent scrapes share one exposition (:class:`SingleFlight`):
    a scrape costs about as much as seven ``/health`` requests, and a flood of them would
    otherwise take the CPU that creates need; none is answered with counts older than
    itself. ``exposition()``: the text and its media type."""

    def __init__(self, exposition: Callable[[], bytes], content_type: str) -> None:
        self._exposition = SingleFlight(exposition)
        self._content_type = content_type

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.data = self._exposition()
        resp.content_type = self._content_type

    on_head = on_get  # the same answer, without its body (Falcon drops it)
