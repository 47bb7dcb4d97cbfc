"""What a forked child must redo before it serves, in one registry, so that no module asks
which server forked it or how: every at-fork action of the package is listed in
:data:`ACTIONS` (each module that keeps per-process state registers one at import).

Pre-fork servers (gunicorn ``--preload``, uWSGI without ``--lazy-apps``, granian) fork
workers from a process that may have started threads, opened a store or drawn a request-id
prefix; a child inherits the memory but not the threads, and must not share the parent's
files or ids. Python's own fork (``os.fork``, ``multiprocessing``) runs the registry through
``os.register_at_fork``; a server that forks without Python's hooks (uWSGI forks its workers
from C) runs it from a hook of its own: :func:`catch_up`, which
:mod:`plant_store.serving.server_quirks` gives uWSGI's ``postfork``.

Invariants:

- Each action runs once in each process forked by Python, or by a server whose hook calls
  :func:`catch_up`, in registration order; never in the process that registered it (the
  registry remembers the PID it last ran in, ``_ran_in``).
- In a process forked with neither (a bare ``fork()`` from C, uWSGI without its master),
  no action runs: they start threads, unsafe where Python's runtime was not told of the
  fork. What must never be used by two processes (the JSON-file store's file:
  :mod:`plant_store.stores.jsonfile.appendlog`) holds an :class:`Owner` and asks it before
  each use, so it refuses in any child, seen or not. Process ids are compared here only.
- Actions run in the child with only the forking thread alive: each makes new locks rather
  than taking one another thread of the parent may have held, starts its threads anew, and
  does not raise (Python ignores an at-fork hook's exception).
- An action is registered once per module, not per object: it walks the module's weak set
  of live objects, so the registry stays as long as the package has modules.
"""

import os
from collections.abc import Callable

ACTIONS: list[Callable[[], None]] = []
_ran_in = os.getpid()  # the process the actions last ran in, or the one that imported this


def register(action: Callable[[], None]) -> Callable[[], None]:
    """Run ``action`` in every child forked from now on (usable as a decorator)."""
    ACTIONS.append(action)
    return action


def catch_up() -> None:
    """A server's hook after its fork: run the actions unless Python's hooks already did."""
    if os.getpid() != _ran_in:
        _after_fork_in_child()


class Owner:
    """The process that made something no child may use: :meth:`forked` says whether the
    caller is another one (one ``getpid``); ``pid`` names the owner."""

    __slots__ = ("pid",)

    def __init__(self) -> None:
        self.pid = os.getpid()

    def forked(self) -> bool:
        return os.getpid() != self.pid


def _after_fork_in_child() -> None:
    global _ran_in
    _ran_in = os.getpid()
    for action in list(ACTIONS):
        action()


os.register_at_fork(after_in_child=_after_fork_in_child)
