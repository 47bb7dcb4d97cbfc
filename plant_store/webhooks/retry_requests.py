"""Dead letters an operator asks a running server to send again: a hand-over by files.

``plant-store webhooks retry`` cannot write to a store a running server holds, so it leaves
a request in the data directory, and the server's webhook worker takes it on its next pass
(every ``webhooks.IDLE`` seconds at most).

Invariants:

- One file per request, ``webhooks-retry-<uuid>.json``, written whole beside its name and
  renamed into place: requests never overwrite one another, and none is read half-written.
- The worker takes a request by renaming it to ``<name>.taken`` before it reads it; the
  command withdraws its own request by unlinking the name. Exactly one of the two succeeds,
  so the command knows whether its request was taken: it was if the unlink finds nothing.
- The worker removes a taken request only once it has acted on it; a request taken by a
  server that died before that is acted on at the next pass (acting twice is harmless: only
  dead letters move back to the outbox). So a command that sees ``<name>.taken`` gone knows
  its dead letters are back in the outbox.
- A request that cannot be read as a list of ids (garbage) is logged and removed, never
  read again; one that cannot be removed is logged once and then left alone. Anything named
  as a request that is not a regular file (a directory, a link, a FIFO: the command never
  makes one) is logged once and left alone: never taken, read nor removed (issue 49).
"""

import logging
import os
import stat
import time
import uuid
from collections.abc import Callable

import orjson

from plant_store.util import files

log = logging.getLogger("plant_store.retry_requests")  # the name users filter on

PREFIX, SUFFIX, TAKEN = "webhooks-retry-", ".json", ".taken"
POLL = 0.05  # seconds between the command's looks


def submit(data_dir: str, delivery_ids: list[str]) -> str:
    """Leave a request for these dead letters; return its path."""
    path = os.path.join(data_dir, f"{PREFIX}{uuid.uuid4().hex}{SUFFIX}")
    with files.replacing(path) as fh:
        fh.write(orjson.dumps(delivery_ids))
    return path


def wait(path: str, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for the request to be taken; True if it was, False if
    it was withdrawn instead. A KeyboardInterrupt meanwhile withdraws it (if not taken yet)
    and is raised again."""
    try:
        _gone(path, timeout)
    finally:
        taken = not _withdraw(path)
    return taken


def acted(path: str, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for a taken request to have been acted on."""
    return _gone(path + TAKEN, timeout)


def _gone(path: str, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for nothing to be at ``path``; True if so."""
    deadline = time.monotonic() + timeout
    while os.path.lexists(path):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL)
    return True


def take(data_dir: str, act: Callable[[list[str]], None], ignored: set[str]) -> None:
    """Claim every request in ``data_dir`` (and any claimed before but not acted on), call
    ``act(ids)`` for each, then remove it. ``ignored``: names already reported as not
    removable, kept by the caller across passes."""
    try:
        names = sorted(os.listdir(data_dir))
    except FileNotFoundError:  # a store with no directory (a memory store's tests)
        return
    for name in names:
        if not name.startswith(PREFIX) or name in ignored:
            continue
        path = os.path.join(data_dir, name)
        if not _regular(path, name, ignored):
            continue
        if name.endswith(SUFFIX):
            try:
                os.rename(path, path + TAKEN)
            except FileNotFoundError:
                continue  # withdrawn meanwhile
            path += TAKEN
        elif not name.endswith(SUFFIX + TAKEN):
            continue
        ids = _read(path)
        if ids is not None:
            act(ids)  # raises, leaving the request to the next pass, if the store fails
        _remove(path, ignored)


def _regular(path: str, name: str, ignored: set[str]) -> bool:
    """Whether ``path`` is a regular file (a request the command could have made); else it
    is logged and added to ``ignored``, to be left alone."""
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            return True
    except FileNotFoundError:
        return False  # withdrawn or acted on meanwhile
    except OSError:
        pass
    log.error("ignoring webhook retry request %s: not a regular file, which plant-store never "
              "makes; leaving it alone", path)
    ignored.add(name)
    return False


def _withdraw(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def _read(path: str) -> list[str] | None:
    try:
        with open(path, "rb", opener=files.opener) as fh:  # a FIFO would hang here
            ids = orjson.loads(fh.read(1 << 20))
    except (OSError, orjson.JSONDecodeError) as exc:
        log.error("ignoring webhook retry request %s: %s", path, exc)
        return None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        log.error("ignoring webhook retry request %s: not a list of delivery ids", path)
        return None
    return ids


def _remove(path: str, ignored: set[str]) -> None:
    try:
        os.unlink(path)  # never a directory's contents: it took only a regular file
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.error("cannot remove webhook retry request %s (%s); leaving it alone", path,
                  exc.strerror)
        ignored.add(os.path.basename(path))
