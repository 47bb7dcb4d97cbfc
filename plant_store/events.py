"""What happened below, told upward: the one way data climbs the layers.

Every layer that has something to tell (the access log and the token check, the plant
resources, the stores, the webhook worker) is handed one :class:`Events` at construction
and calls a method of it; the metrics implement it, and the webhook worker subscribes to
``created``. Defined here, at the bottom, so a store or a resource imports nothing above
itself to be heard, and the import graph still runs one way. A new signal is one method
here (a no-op) and one override where it is heard.

The cost on the hot path is the call itself: :class:`Fanout` binds each event to its one
subscriber's own method when only one hears it, so nothing stands between the caller and
the subscriber (a create is, webhooks on, one ``created``; the requests answered are told
in batches, ``requests``, off the request's thread as a rule).
"""

from typing import Any

# A request answered, as the access log records it on the request's thread (raw fields,
# nothing derived): (time.perf_counter() at the answer, client address, method, mount point
# (SCRIPT_NAME), path (below the mount point), status as the app set it, seconds from
# arrival to answer, request id, route template, or None when no route took it).
Answered = tuple[float, str, str, str, str, Any, float, str, str | None]

class Events:
    """The events, each heard by nobody: a subscriber overrides the ones it hears, and an
    ``Events()`` is the do-nothing default (metrics off, webhooks off, a store opened bare)."""

    def requests(self, answered: list[Answered]) -> None:
        """Requests answered by the app, in the order they were (the access log, every
        request, told in batches: each request once)."""

    def dropped(self, lines: int) -> None:
        """Access lines dropped: their destination did not take them in time."""

    def refused(self, reason: str) -> None:
        """One request refused 401 by the token check, for ``reason``."""

    def refused_by_server(self, method: str, path: str, status: int) -> None:
        """One request the server answered itself (waitress's 400, 413, 431, 501; granian's
        413)."""

    def unavailable(self, operation: str, cause: str) -> None:
        """One request answered 503 because the store refused ``operation`` for ``cause``
        (one of ``stores.base.CAUSES``)."""

    def created(self) -> None:
        """A create that owes webhook deliveries was acknowledged (the worker wakes)."""

    def attempted(self, outcome: str) -> None:
        """One webhook delivery attempt's outcome: delivered, failed or dead."""

    def wrote(self, seconds: float) -> None:
        """One durable write took ``seconds``: a JSON-file group commit (its fsync), or a
        PostgreSQL write statement's round trip."""

    def compacted(self, seconds: float) -> None:
        """One compaction of the JSON file took ``seconds``."""


NAMES = tuple(name for name in vars(Events) if not name.startswith("_"))  # every event


class Fanout(Events):
    """Several subscribers as one :class:`Events`: each event goes to those that override
    it, in the order given. Bound once, here: an event one subscriber hears is that
    subscriber's own method (no call in between), one nobody hears stays a no-op."""

    def __init__(self, *subscribers: Events) -> None:
        self.subscribers = subscribers
        for name in NAMES:  # a Fanout among them: what it hears is bound on the instance
            heard = [getattr(each, name) for each in subscribers if getattr(
                getattr(each, name), "__func__", None) is not getattr(Events, name)]
            if len(heard) == 1:
                setattr(self, name, heard[0])
            elif heard:
                setattr(self, name, _all(heard))


def _all(methods: list[Any]) -> Any:
    def told(*args: Any) -> None:
        for method in methods:
            method(*args)
    return told
