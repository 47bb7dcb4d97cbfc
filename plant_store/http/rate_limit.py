"""Per-client rate limits (the ``rate_limit`` and ``rate_limit_burst`` settings): a token
bucket per client, in memory, checked before routing, so a refused request costs no body
parse and no store.

A client is the bearer token it sent, by label, when the token verified (the token check
puts the label on ``req.context.token_label``); else its address, ``REMOTE_ADDR`` after the
forwarded headers were applied, so behind a trusted proxy it is the real client. ``/health``
and ``/ready`` are never limited: an orchestrator must reach them. Buckets are per process:
with several workers or instances, each takes the rate on its own (``docs/deploying.rst``
says when nginx's ``limit_req`` fits better).
"""

import collections
import math
import threading
import time
from collections.abc import Callable

import falcon

EXEMPT = frozenset({"/health", "/ready"})
SIZE = 10_000  # buckets at most: about 150 bytes each
# A nanosecond: what float sums of intervals may be off by (0.1 * 5 is not 0.5), so that a
# full bucket still takes burst + 1 at once.
SLACK = 1e-9


class Buckets:
    """A token bucket per client key, of ``burst + 1`` requests, refilled at ``rate`` a
    second; stored as the one time at which it will be full again (the "theoretical arrival
    time" of GCRA), which says everything the bucket's level would.

    Invariants:

    - A bucket absent from the table is a full one: a new client, or one evicted, starts
      full, as one idle for ``(burst + 1) / rate`` seconds would be.
    - ``take`` takes a request iff the bucket holds one: ``max(full_at, now) - now <=
      burst / rate`` (give or take ``SLACK``), and then moves ``full_at`` one interval
      (``1 / rate``) later. A refused request takes nothing, so a client that keeps sending
      past its limit is still served at ``rate``.
    - The table holds at most ``size`` buckets, in least recently used order (under one
      lock, with the clock read inside it, so the times of one key never go back). A new
      key past ``size`` evicts the least recently used one. That loses nothing when its
      bucket was full; it was not full only if it was used within the last ``(burst + 1) /
      rate`` seconds, and then so were all ``size - 1`` others: it takes ``size`` clients
      active within that time for a client to gain, at most, one bucket's worth.
    """

    def __init__(self, rate: float, burst: int, size: int = SIZE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst < 0 or size < 1:
            raise ValueError("rate must be above 0, burst at least 0, size at least 1")
        self._interval = 1 / rate
        self._tolerance = burst / rate  # how far ahead of now full_at may be, and still take
        self._size = size
        self._clock = clock
        self._lock = threading.Lock()
        self._full_at: collections.OrderedDict[str, float] = collections.OrderedDict()

    def take(self, key: str) -> float:
        """Take one request from ``key``'s bucket: 0.0 if taken, else the seconds until
        one would be (above 0)."""
        with self._lock:
            now = self._clock()
            table = self._full_at
            full_at = table.get(key)
            if full_at is None:
                if len(table) >= self._size:
                    table.popitem(last=False)
                table[key] = now + self._interval
                return 0.0
            table.move_to_end(key)
            start = full_at if full_at > now else now
            wait = start - now - self._tolerance
            if wait > SLACK:
                return wait
            table[key] = start + self._interval
            return 0.0

    def __len__(self) -> int:
        return len(self._full_at)


class RateLimit:
    """The middleware: after the token check (which names the token), before routing."""

    def __init__(self, buckets: Buckets, exempt: frozenset[str] = EXEMPT) -> None:
        self._buckets = buckets
        self._exempt = exempt

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.path in self._exempt:
            return
        label = getattr(req.context, "token_label", None)
        # An address has no space in it, so no label can pass for one.
        key = "token " + label if label is not None else req.env.get("REMOTE_ADDR") or "-"
        wait = self._buckets.take(key)
        if wait:
            seconds = max(1, math.ceil(wait))
            who = "token" if label is not None else "address"
            raise falcon.HTTPTooManyRequests(
                description=f"Too many requests from this {who}; retry in {seconds} s.",
                retry_after=seconds)
