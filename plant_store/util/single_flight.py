"""One computation shared by the callers that wait for it: many concurrent scrapes of
``/metrics`` cost about one exposition at a time, not one each."""

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    """Calls ``compute`` for its callers, at most once at a time.

    Invariants:

    - At most one computation runs at a time.
    - A caller's result comes from a computation that started after the caller arrived, so
      it is never older than the request: a caller arriving while one runs waits for the
      next one, which it starts itself or shares with the others that waited.
    - Computations are numbered as they start; ``_finished`` is the number of the last
      that succeeded and ``_result`` its result. A caller arriving when ``_started`` was
      n takes the result once ``_finished > n``.
    - A computation that raises raises in its own caller only; those waiting for it start
      another (one of them), as if it had not run.
    """

    def __init__(self, compute: Callable[[], T]) -> None:
        self._compute = compute
        self._changed = threading.Condition(threading.Lock())
        self._running = False
        self._started = 0
        self._finished = 0
        self._result: T | None = None

    def __call__(self) -> T:
        with self._changed:
            wanted = self._started + 1
            while self._finished < wanted:
                if not self._running:
                    self._running = True
                    self._started += 1
                    number = self._started
                    break
                self._changed.wait()
            else:
                return self._result  # type: ignore[return-value]  # set with _finished
        try:
            result = self._compute()
        except BaseException:
            with self._changed:
                self._running = False
                self._changed.notify_all()
            raise
        with self._changed:
            self._running = False
            self._finished, self._result = number, result
            self._changed.notify_all()
        return result
